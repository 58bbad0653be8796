"""ENGINE_PROCESS: a model's requests served by vLLM in a process of its own (engine_process.py), the stub
relaying. Why, and the messages between the two: engine_process.py's docstring.

The stub's threads, each with one job, none of them waiting on another:

- admission: execute() hands over Triton's requests as they are and returns; this thread reads each (inputs,
  sampling parameters, LoRA adapter, as in-process) and passes it on to the engine's process (with only a few
  requests in flight, execute() does that itself);
- receiving: reads the engine process's messages, one per loop turn there, and queues each turn's outputs for the
  sender;
- sending: sends the queued outputs' responses, what a client waits on first (send_order.py), telling the engine
  process which requests may read their next output; and the final responses that waited for their stats, ahead of
  the rest. One thread: a send is a round trip to the server, and while one is in flight a request's next output
  waits in the engine's process, where vLLM merges what the engine makes meanwhile into it. Four threads, each
  request's on one, sent 18-34 % more responses per request than one on an H100 for the same tokens, took 27-32 %
  more of the server's CPU, and gave 0.973-0.976x raw AsyncLLM's throughput at 256-384 streams where one gave
  0.983-0.988x (bench/results/backend.md, "The backend's settings, measured");
- watching: asks Triton, at most WATCH_CHECKS_PER_S times a second in turn, whether a request was cancelled (the
  engine process then aborts it in the engine), and sees the engine process exit.

vLLM's metrics (REPORT_CUSTOM_METRICS) are recorded in the engine's process and merged into the stub's accumulator,
whose thread reports them and sends the final responses that wait for them, as in-process (metrics.py). One response
per token (STREAM_ONE_RESPONSE_PER_TOKEN): the engine's process splits the outputs (per_token.py), the stub sends
each. OpenAI requests: vLLM's app answers them in the engine's process (openai_serving.py), whose bytes come back
as outputs like the rest; a streamed answer whose gateway named its stream socket goes there from that process.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Client, Connection
from typing import Any

from . import environment, errors, hops, jobs, log, metrics, metrics_report, native, openai_serving, sends, stub
from .configuration import bool_parameter, one_gpu_engine
from .engine_stop import kill_group
from .send_order import ENDS, FIRST, FOLLOWING, SendWork

PARAMETER = "ENGINE_PROCESS"
# The hop benchmarks' timestamps (hops.py): X, A, V, W, S, H, L and F here, P, E and O in the engine's process.
_hop, _no_hop = hops.hop, hops.off


def wanted(
    params: dict[str, str],
    instance_kind: str,
    engine_config: Mapping[str, Any] | None = None,
    on_gpu: Callable[[], bool] = environment.vllm_on_gpu,
) -> bool:
    """ENGINE_PROCESS as config.pbtxt sets it; left out, on for an engine of one GPU: an instance of KIND_GPU, or of
    KIND_MODEL (what `vllm-repo init` writes) whose engine (model.json's ``engine_config``) takes one GPU, where vLLM
    runs on GPUs (``on_gpu()``, asked only then). From 128 streams on, one GIL serving both vLLM and Triton's side held
    the stub well behind raw AsyncLLM where vLLM's own process kept close to it (bench/results/backend.md). A CPU
    instance keeps the stub (the engine is the limit there, and a process more takes a core); an engine over several
    GPUs (tensor or pipeline parallelism, data parallelism, Ray) keeps it until measured."""
    kind = instance_kind.upper()
    one_gpu = kind in ("GPU", "KIND_GPU") or (
        kind in ("MODEL", "KIND_MODEL") and engine_config is not None and one_gpu_engine(engine_config) and on_gpu()
    )
    return bool_parameter(params, PARAMETER, default=one_gpu)


# How long the engine's process may take to start vLLM (a first start compiles and captures CUDA graphs).
READY_TIMEOUT_S = 1800.0
WATCH_INTERVAL_S = 0.1
WATCH_CHECKS_PER_S = 250  # as in the stub's own watcher (model.py says why)
# Below this many requests in flight, execute() reads and posts its requests itself (ProcessEngine.execute says why);
# from it on, the admission thread does, as measured under load.
ADMIT_IN_EXECUTE_BELOW = 8
# How long finalize waits for the engine's process to stop vLLM before it is killed.
STOP_TIMEOUT_S = 30.0
# How long finalize waits for the send thread to send what is queued (the final responses held for their stats).
SENDS_DRAIN_S = 10.0
# Responses sent before the engine's process is told those requests may read their next output, unless the batch
# ends first: a batch under load holds hundreds, and each request's next output waits for this word.
SENT_CHUNK = 64


def engine_death(model_name: str, health_check: bool, cause: str) -> str:
    """What the requests of a model whose engine died are told. With ENABLE_VLLM_HEALTH_CHECK the model is unloaded
    first (Triton unloads it after this returns), so that it reports not ready; the log names the model, so that
    whoever reads it (launch does) knows which one stopped serving."""
    unloaded = False
    if health_check:
        try:
            stub.pb_utils.unload_model(model_name)
            unloaded = True
        except Exception as exc:
            log.error(f"[vllm] could not unload model {model_name} (needs --model-control-mode=explicit): {exc}")
    reason = f"the vLLM engine has died: {cause}; {errors.after_engine_death(model_name, health_check, unloaded)}"
    log.error(f"[vllm] model {model_name}: {reason}")
    return reason


class ProcessEngine:
    """The stub's side of ENGINE_PROCESS for one model instance: start() at initialize, execute() for each call,
    finalize() at unload."""

    def __init__(
        self,
        model_name: str,
        version_dir: str,
        reader: native.NativeRequestReader,
        health_check: bool,
        *,
        metric_labels: dict[str, str] | None = None,
        one_response_per_token: bool = False,
        lora_adapters: dict[str, str] | None = None,
        per_value_histograms: bool = False,
    ):
        self.model_name, self.version_dir, self.reader, self.health_check = (
            model_name,
            version_dir,
            reader,
            health_check,
        )
        self.metric_labels, self.one_response_per_token = metric_labels, one_response_per_token
        self.lora_adapters, self.per_value_histograms = lora_adapters, per_value_histograms
        # Set once vLLM is up, where metrics are reported (metric_labels) and the server has them.
        self.accumulator: metrics.MetricsAccumulator | None = None
        self.metrics: metrics_report.TritonMetrics | None = None
        self.live: dict[str, jobs.Job | jobs.OpenAIJob] = {}
        self.closing = False
        self.dead_reason: str | None = None
        self.sends = 0  # counted on the send thread
        self._post_lock = threading.Lock()
        self._admissions: queue.SimpleQueue = queue.SimpleQueue()
        self._admission_lock = threading.Lock()
        self._queued_admissions = 0  # execute() calls whose requests the admission thread has not finished
        # The send thread's work: the outputs, and the final responses that waited for their stats, in the order
        # clients wait on them (send_order.py).
        self._send_work = SendWork(self._urgency)
        self._send_thread: threading.Thread | None = None
        self._stop_watching = threading.Event()
        self._death_lock = threading.Lock()
        self._log_start = environment.log_size(environment.server_log_file())

    # -- start and stop -------------------------------------------------------------------------------------------
    def start(self) -> str:
        """Start the engine's process and wait until vLLM is up there; its description for the log."""
        self._dir = tempfile.mkdtemp(prefix="vllm-engine-")
        address, authkey = os.path.join(self._dir, "engine.sock"), secrets.token_bytes(16)
        backend_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.pathsep.join(p for p in (backend_dir, os.environ.get("PYTHONPATH", "")) if p)
        # The stub's Python is the serving environment's, as for vLLM's own processes; its output goes to the
        # server's log with the stub's.
        options: dict[str, Any] = {"model_name": self.model_name, "metrics": self.metric_labels is not None}
        options["per_value_histograms"] = self.per_value_histograms
        options["lora_adapters"] = self.lora_adapters  # multi_lora.json's: vLLM's app serves them as lora_modules
        command = [sys.executable, "-m", "vllm_repo_backend.engine_process", address, authkey.hex()]
        self.child = subprocess.Popen(
            [*command, self.version_dir, json.dumps(options)],
            env={**os.environ, "PYTHONPATH": path},
        )
        try:
            self.conn = self._connect(address, authkey)
            answer, max_model_len = self._wait_ready()
        except BaseException:
            self._kill()
            raise
        if self.metric_labels is not None:
            accumulator = metrics.MetricsAccumulator(self.per_value_histograms)
            try:
                self.metrics = metrics_report.TritonMetrics(
                    self.metric_labels, max_model_len, accumulator, self.per_value_histograms
                )
                self.accumulator = accumulator
            except Exception as exc:  # e.g. the server runs with metrics off
                log.warn(f"[vllm] REPORT_CUSTOM_METRICS is on but metrics are unavailable: {exc}")
        threads = (
            ("vllm-admit", self._admit_loop),
            ("vllm-receive", self._receive_loop),
            ("vllm-watch", self._watch_loop),
        )
        for name, target in threads:
            threading.Thread(target=target, name=name, daemon=True).start()
        self._start_send_thread()
        return answer

    def _start_send_thread(self) -> None:
        self._send_thread = threading.Thread(target=self._send_loop, name="vllm-sends", daemon=True)
        self._send_thread.start()

    def _connect(self, address: str, authkey: bytes) -> Connection:
        deadline = time.monotonic() + 120
        while True:  # the engine's process listens before it starts vLLM
            if self.child.poll() is not None:
                raise RuntimeError(f"the engine's process exited ({self.child.returncode}) before it started vLLM")
            try:
                return Client(address, family="AF_UNIX", authkey=authkey)
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise RuntimeError("the engine's process did not listen within 120 s") from None
                time.sleep(0.05)

    def _wait_ready(self) -> tuple[str, int]:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self.conn.poll(1.0):
            if self.child.poll() is not None:
                raise RuntimeError(f"the engine's process exited ({self.child.returncode}) while vLLM started")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM did not start within {READY_TIMEOUT_S:g} s in the engine's process")
        answer = self.conn.recv()
        if answer[0] != "ready":
            if answer[2] == "config":
                raise errors.BackendConfigError(answer[1])
            raise RuntimeError(f"vLLM could not start in the engine's process: {answer[1]}")
        return str(answer[1]), int(answer[2])

    def finalize(self) -> None:
        self.closing = True
        self._stop_watching.set()
        for job in list(self.live.values()):
            job.cancel_reason = job.cancel_reason or "the model is being unloaded"
            self._end(job, job.cancel_reason, "UNAVAILABLE")
        self._admissions.put(None)
        self._post(("stop",))
        try:
            self.child.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warn(f"[vllm] the engine's process had not stopped after {STOP_TIMEOUT_S:g} s: killed")
            self._kill()
        if self.metrics is not None:
            self.metrics.stop()  # the final responses it holds go to the send thread (without stats now)
        self._send_work.stop()  # after what is queued
        if self._send_thread is not None:
            self._send_thread.join(timeout=SENDS_DRAIN_S)
        self.conn.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        log.info(f"[vllm] {self.sends} responses sent")

    def _kill(self) -> None:
        self.child.kill()
        self.child.wait()
        self._kill_group()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _kill_group(self) -> None:
        """Kill what is left of the engine's process group: vLLM's EngineCore outlives an engine process killed
        outright, holding the GPU's memory and (forked) the engine's end of the connection. What they had mapped in
        /dev/shm (the EngineCore's semaphores, its message queues) goes with them."""
        removed = kill_group(self.child.pid)
        if removed:
            log.info(f"[vllm] removed {len(removed)} shared-memory segment(s) the engine's processes left")

    def _post(self, message: tuple) -> bool:
        try:
            with self._post_lock:
                self.conn.send(message)
            return True
        except (OSError, ValueError):  # the engine's process is gone: the receiver says so
            return False

    # -- requests in ----------------------------------------------------------------------------------------------
    def execute(self, requests: Sequence[Any]) -> None:
        # Triton hands the next execute() only once this returns: under load the requests are read on the admission
        # thread. Their response senders are taken here, on the stub's main thread, while Triton's call is still in
        # progress. With few requests in flight and none queued for that thread, they are read and posted here
        # instead: after execute() returns, the stub holds the GIL until the server acknowledges it, so a hand-off to
        # the admission thread waits that long, and a lone stream's first token with it.
        if _hop is not _no_hop:
            hops.executed(requests)
        taken = [(request, request.get_response_sender()) for request in requests]
        with self._admission_lock:
            in_execute = self._queued_admissions == 0 and len(self.live) < ADMIT_IN_EXECUTE_BELOW
            if not in_execute:
                self._queued_admissions += 1
        if in_execute:  # the admission thread has nothing to read: no request can pass one taken before
            for request, sender in taken:
                self._admit(request, sender)
        else:
            self._admissions.put(taken)

    def _admit_loop(self) -> None:
        log.name_os_thread("vllm-admit")
        while (requests := self._admissions.get()) is not None:
            for request, sender in requests:
                self._admit(request, sender)
            with self._admission_lock:
                self._queued_admissions -= 1

    def _admit(self, request: Any, sender: Any) -> None:
        openai_request = native.first_element(jobs.input_array(request, "openai_request"))
        if openai_request is not None:
            self._admit_openai(sender, openai_request)
            return
        if self.dead_reason is not None or self.closing:
            sends.send_error(sender, self.dead_reason or "the model is being unloaded", "UNAVAILABLE")
            return
        job = jobs.read_native(self.reader, request, sender, self.one_response_per_token)
        if job is None:
            return
        self.live[job.request_id] = job
        if _hop is not _no_hop:
            hops.admitted(job.request_id, job.request)
        if self.accumulator is not None:
            self.accumulator.expect(job.request_id, job.options.n)
        split_tokens = job.token_history is not None  # the engine's process splits them
        if not self._post(("add", job.request_id, job.prompt, job.sampling_params, job.lora_request, split_tokens)):
            self._end(job, self.dead_reason or "the engine's process is gone", "UNAVAILABLE")

    def _admit_openai(self, sender: Any, raw: Any) -> None:
        alive = self.dead_reason is None and not self.closing
        admitted = openai_serving.admit(raw, self.dead_reason, self.closing, alive)
        if isinstance(admitted, openai_serving.OpenAIOutput):
            sends.send_openai_final(sender, admitted.status, admitted.data)
            return
        job = openai_serving.new_job(sender, jobs.new_request_id(), admitted)
        self.live[job.request_id] = job
        if not self._post(("openai", job.request_id, admitted)):
            self._end(job, self.dead_reason or "the engine's process is gone", "UNAVAILABLE")

    # -- responses out --------------------------------------------------------------------------------------------
    def _receive_loop(self) -> None:
        log.name_os_thread("vllm-receive")
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "outputs":
                if _hop is not _no_hop:
                    hops.first_outputs_read(message[1], self.live)
                if message[2] is not None and self.accumulator is not None:
                    self.accumulator.merge(message[2])  # before the turn's final responses are held for them
                if message[1]:
                    self._send_work.add_outputs(message[1])
            elif message[0] == "dead":
                self._on_dead()
        if not self.closing:
            self._on_dead(gone=True)

    def _send_loop(self) -> None:
        log.name_os_thread("vllm-sends")
        work = self._send_work
        while (batch := work.take()) is not None:
            sent: list[str] = []
            for output in batch:
                if work.urgent_ready:  # before every send: a batch takes milliseconds at a few hundred streams
                    self._send_urgent(sent)
                self._send_output(output, sent)
            self._send_urgent(sent)
            if sent and not self.closing:
                self._post(("sent", sent))

    def _send_urgent(self, sent: list[str]) -> None:
        """The final responses ready, then the outputs that may jump the queue (send_order.py)."""
        work = self._send_work
        while True:
            for send in work.pop_finals():
                send()
            if (output := work.pop_urgent()) is None:
                return
            self._send_output(output, sent)

    def _send_output(self, output: tuple[str, Any, Any], sent: list[str]) -> None:
        """Deliver one output; the engine's process hears "sent" for its request every SENT_CHUNK sends."""
        if self._deliver(*output):
            sent.append(output[0])
            if len(sent) == SENT_CHUNK and not self.closing:
                self._post(("sent", sent[:]))
                sent.clear()

    def _urgency(self, key: str, output: Any, end: tuple[str, str] | None) -> int:
        """How soon an output's client waits on it (send_order.py)."""
        if end is not None or output is None or getattr(output, "finished", False) or getattr(output, "final", False):
            return ENDS
        job = self.live.get(key)
        return FIRST if getattr(job, "first", False) else FOLLOWING

    def _deliver(self, key: str, output: Any, end: tuple[str, str] | None) -> bool:
        """Send one output's response, or a request's end; True where the request goes on."""
        job = self.live.get(key)
        if job is None:
            return False
        if end is not None:
            message, code = end
            if code == "":  # aborted because the stub asked
                message = job.cancel_reason or "request was cancelled"
                code = "CANCELLED" if message == "request was cancelled" else "UNAVAILABLE"
                if code == "CANCELLED":
                    log.info(f"[vllm] request {job.request_id} cancelled by the client: aborted in the engine")
                    log.info(f"[vllm] Successfully cancelled the request {job.request_id}")  # Triton's own words
            elif code == "DEAD":
                self._on_dead()
                message, code = self.dead_reason or message, "UNAVAILABLE"
            self._end(job, message, code)
            return False
        if isinstance(job, jobs.OpenAIJob):
            return self._deliver_openai(job, output)
        if _hop is not _no_hop and job.first:
            _hop("W", key)
        final = bool(output.finished)
        if job.finished or (final and not self._finish(job)):
            return False  # ended meanwhile (unloaded, or the engine died): its final response went out
        first, job.first = job.first, False
        try:
            response = sends.native_response(job.options, output, first)
            if final and self.accumulator is not None:
                # Sent once this request's stats are reported (metrics.py says why): the metrics thread hands it to
                # the send thread, and goes on reporting.
                send = functools.partial(self._send_final, job, response)
                self.accumulator.send_final_after_stats(key, functools.partial(self._release_final, key, send))
                if _hop is not _no_hop:
                    _hop("H", key)
                return False
            job.sender.send(response, flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)
            self.sends += 1
            if _hop is not _no_hop:
                _hop("F" if final else "S", key)
        except Exception as exc:  # the client is gone: the engine's process aborts the request
            log.warn(f"[vllm] could not send a response: {exc}")
            if not final:
                job.cancel_reason = "request was cancelled"
                self._post(("abort", key, job.cancel_reason))
            return False
        return not final

    def _deliver_openai(self, job: jobs.OpenAIJob, output: openai_serving.OpenAIOutput) -> bool:
        if job.finished or (output.final and not self._finish(job)):
            return False
        try:
            job.sender.send(
                sends.openai_response(output.status, output.data),
                flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if output.final else 0,
            )
            self.sends += 1
        except Exception as exc:  # the client may be gone: stop generating for it
            log.warn(f"[vllm] could not send an OpenAI response: {exc}")
            if not output.final:
                job.cancel_reason = jobs.send_failure_reason(job)
                self._post(("abort", job.request_id, job.cancel_reason))
        return not output.final

    def _release_final(self, key: str, send: Any) -> None:
        """The metrics thread's hand-off of a final response whose stats are reported: it goes before what is queued."""
        if _hop is not _no_hop:
            _hop("L", key)
        self._send_work.add_final(send)

    def _send_final(self, job: jobs.Job | jobs.OpenAIJob, response: Any) -> None:
        try:
            job.sender.send(response, flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            self.sends += 1
            if _hop is not _no_hop:
                _hop("F", job.request_id)
        except Exception as exc:  # the client is gone: the request has finished anyway
            log.warn(f"[vllm] could not send a final response: {exc}")

    def _finish(self, job: jobs.Job | jobs.OpenAIJob) -> bool:
        """Mark the request finished, once: False where another thread did first (only one final response)."""
        with job.lock:  # waits for a cancellation check in flight on the watcher thread
            if job.finished:
                return False
            job.finished = True
        self.live.pop(job.request_id, None)
        return True

    def _end(self, job: jobs.Job | jobs.OpenAIJob, message: str, code: str) -> None:
        if self._finish(job):
            sends.send_error(job.sender, message, code)
            if self.accumulator is not None:
                self.accumulator.forget(job.request_id)

    # -- cancellation and the engine's death ----------------------------------------------------------------------
    def _watch_loop(self) -> None:
        log.name_os_thread("vllm-watch")
        budget = max(1, int(WATCH_CHECKS_PER_S * WATCH_INTERVAL_S))
        start = 0
        while not self._stop_watching.wait(WATCH_INTERVAL_S):
            self._check_alive()
            live, start = jobs.next_to_check(list(self.live.values()), budget, start)
            for job in live:
                if jobs.client_cancelled(job):
                    job.cancel_reason = "request was cancelled"
                    if isinstance(job, jobs.Job):  # vLLM's app in the engine's process logs its own
                        log.info(f"[vllm] Cancelling the request {job.request_id}")
                    self._post(("abort", job.request_id, job.cancel_reason))

    def _check_alive(self) -> None:
        """The engine's process can die without its connection closing: a process vLLM forked from it (EngineCore)
        holds the connection's socket too, so the receiver would wait on it for ever. Seen on an H200, the engine's
        process killed under load: every request hung and the model stayed ready."""
        if self.closing or self.dead_reason is not None or self.child.poll() is None:
            return
        self._on_dead(gone=True)
        try:
            self.conn.close()  # the receiver's wait ends
        except OSError:
            pass

    def _on_dead(self, gone: bool = False) -> None:
        """The engine died (its process said so), or its process is ``gone`` (its connection closed, or the watcher
        saw it exit): once, whichever thread sees it first."""
        with self._death_lock:
            if self.dead_reason is None and not self.closing:
                self._record_death(gone)

    def _record_death(self, gone: bool) -> None:
        try:
            exited = self.child.wait(timeout=5) if gone else self.child.poll()
        except subprocess.TimeoutExpired:
            exited = None
        cause = environment.death_cause_in_server_log(self._log_start)
        if exited is not None:
            cause = f"its process {environment.exit_description(exited)}; {cause}"
            self._kill_group()
        self.dead_reason = engine_death(self.model_name, self.health_check, cause)
        for job in list(self.live.values()):
            if gone or isinstance(job, jobs.Job):  # vLLM's app answers its own requests, as vllm serve does
                self._end(job, self.dead_reason, "UNAVAILABLE")
        if self.accumulator is not None:
            self.accumulator.release_held()  # no stats will come from a dead engine
