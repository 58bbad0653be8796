"""vLLM backend for Triton Inference Server: a Python-based backend that drives vLLM's AsyncLLM.

Install it as ``<backend directory>/vllm/model.py`` with its package ``vllm_repo_backend/`` beside it (``vllm-repo
backend install DIR`` writes both); a model whose config.pbtxt says ``backend: "vllm"`` then loads it. The model's
``<version>/model.json`` holds vLLM's engine arguments.

This file is what Triton calls: auto_complete_config, initialize, execute and finalize, and the engine loop that
admits requests, feeds vLLM and sends the responses. The parts that stand apart from it are modules of the package
beside it (its __init__ lists them): the contract, request and sampling-parameter parsing, the OpenAI wire and stream
link, vLLM's OpenAI app, metrics, the environment and version checks, logging. Triton's stub puts this file's
directory on sys.path and imports this file as ``model``, so the package is imported by its top-level name. That name
is the project's own, not a generic one like the ``utils`` of Triton's own vLLM backend, because Ray workers import
modules by name, with whatever directories their sys.path holds: a generic name clashes there. And nothing of the
package is handed to vLLM, which pickles what it sends to its engine core and its Ray workers (possibly on hosts
without this directory): only vLLM's own types and plain data go.

Request/response contract (unchanged from the upstream vLLM backend, so existing clients work; contract.py has it as
data):
  inputs  text_input (STRING [1]); optional image (STRING [-1], base64), stream, exclude_input_in_output,
          return_finish_reason, return_cumulative_logprob, return_logprobs, return_num_input_tokens,
          return_num_output_tokens (BOOL [1]), sampling_parameters (STRING [1], a JSON object)
  outputs text_output (STRING [-1]), finish_reason (STRING [-1]), cumulative_logprob (FP32 [-1]),
          logprobs (STRING [-1], JSON), num_input_tokens (UINT32 [1]), num_output_tokens (UINT32 [-1])
Sampling parameters come from the ``sampling_parameters`` JSON and from the request's parameters (the latter
overridden by the former); ``lora_name`` picks an adapter from ``<version>/multi_lora.json``.

OpenAI requests (an ``openai_request`` input, what an OpenAI gateway forwards) are answered by vLLM's own OpenAI app:
vllm_repo_backend/openai_serving.py has their contract. config.pbtxt's parameters (REPORT_CUSTOM_METRICS,
ENGINE_PROCESS, ...) are listed in vllm_repo_backend/configuration.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

# One copy of each module whichever way this file is imported. As vllm_repo.backend.model (vllm-repo's tests), the
# package is its sibling subpackage; as "model" (Triton's stub, which puts this file's directory on sys.path), it is
# found by its top-level name, the directory appended for a loader that imports this file by path alone. mypy reads
# the relative import (TYPE_CHECKING is False at run time, so there __package__ alone decides).
if TYPE_CHECKING or __package__:
    from .vllm_repo_backend import (
        configuration,
        contract,
        engine_link,
        engine_stop,
        environment,
        errors,
        hops,
        jobs,
        log,
        metrics,
        metrics_report,
        native,
        openai_serving,
        per_token,
        sends,
        stub,
    )
else:
    if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    from vllm_repo_backend import (
        configuration,
        contract,
        engine_link,
        engine_stop,
        environment,
        errors,
        hops,
        jobs,
        log,
        metrics,
        metrics_report,
        native,
        openai_serving,
        per_token,
        sends,
        stub,
    )

# The hop benchmarks' timestamps (hops.py): with VLLM_REPO_TRACE_HOPS unset, one reference compared per site.
_hop, _no_hop = hops.hop, hops.off

# The stub's GIL switch interval. Triton hands a model its requests one execute() at a time, and waits for each to
# return before the next; execute() runs on the stub's main thread, which must first take the GIL from the busy
# engine loop, and at Python's default of 5 ms it got it only when that interval forced a switch (measured:
# bench/results/backend.md, "The backend's settings, measured").
ADMISSION_SWITCH_INTERVAL_S = 0.001
# The log line's words before the interval (tests look for them).
SWITCH_INTERVAL_LOG = "the GIL switch interval is"

# How long finalize waits for vLLM's engine to stop in order before killing what is left of its processes
# (engine_stop.py): its orderly teardown can outlast Triton's exit timeout.
ENGINE_STOP_GRACE_S = 1.0

# How often in-flight requests are checked for client cancellation and the engine for death.
WATCH_INTERVAL_S = 0.1
# At most this many cancellation checks a second, taken in turn: each is a round trip to the server and a wait for the
# GIL when it returns, where that one GIL is what limits the stub under load. Beyond WATCH_CHECKS_PER_S / 10 requests
# in flight a client's cancellation is seen within (requests / WATCH_CHECKS_PER_S) s instead of WATCH_INTERVAL_S
# (the figures: bench/results/backend.md, "The backend's settings, measured").
WATCH_CHECKS_PER_S = 250


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        return configuration.auto_complete(auto_complete_model_config)

    # -- initialize -------------------------------------------------------------------------------------------------
    def initialize(self, args: Mapping[str, str]) -> None:
        self.args = args
        self.model_name = args["model_name"]
        self.model_config = json.loads(args["model_config"])
        if not stub.pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise errors.BackendConfigError(
                "the vLLM backend streams responses: set `model_transaction_policy { decoupled: true }` in "
                "config.pbtxt (or leave it out and let the backend fill it in)"
            )
        params = configuration.config_parameters(self.model_config)
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        engine_config = self._read_settings(params, version_dir)
        self.vllm = environment.import_vllm()
        self.vllm_version = self.vllm.version
        self.engine_args = configuration.build_engine_args(
            engine_config,
            self.vllm.AsyncEngineArgs,
            self.vllm.version,
            os.path.join(version_dir, contract.ENGINE_ARGS_FILE),
        )
        self._metric_labels = {"model": self.model_name, "version": str(args["model_version"])}
        self._reader = native.NativeRequestReader(self.vllm, self.lora_adapters, self.default_max_tokens)
        self._process: engine_link.ProcessEngine | None = None
        if engine_link.wanted(params, args.get("model_instance_kind", ""), engine_config):  # in a process of its own
            self._process = engine_link.ProcessEngine(
                self.model_name, version_dir, self._reader, self.health_check,
                metric_labels=self._metric_labels if self.report_metrics else None,
                per_value_histograms=self.per_value_histograms,
                one_response_per_token=self.one_response_per_token, lora_adapters=self.lora_adapters,
            )  # fmt: skip
            description = self._process.start()
            self._admit_soon()
            log.info(f"[vllm] model {self.model_name} ready ({description})")
            return
        self._start_in_stub(version_dir)
        self._admit_soon()
        log.info(
            f"[vllm] model {self.model_name} ready (vLLM {self.vllm_version}){environment.kv_cache_text(self.engine)}"
        )

    def _read_settings(self, params: Mapping[str, str], version_dir: str) -> dict[str, Any]:
        """config.pbtxt's parameters and model.json (returned): what is served, and on which GPUs."""
        self.health_check = configuration.bool_parameter(params, "ENABLE_VLLM_HEALTH_CHECK")
        self.default_max_tokens = configuration.int_parameter(params, "DEFAULT_MAX_TOKENS")
        self.one_response_per_token = configuration.bool_parameter(params, "STREAM_ONE_RESPONSE_PER_TOKEN")
        engine_config = configuration.load_engine_config(version_dir)
        self.report_metrics = metrics.metrics_enabled(params, engine_config)
        self.per_value_histograms = configuration.bool_parameter(params, "REPORT_HISTOGRAMS_PER_VALUE")
        self.lora_adapters = None
        if native.parse_bool(engine_config.get("enable_lora", False), "model.json enable_lora"):
            self.lora_adapters = configuration.load_lora_adapters(version_dir)
        args = self.args
        visible = configuration.plan_visible_devices(
            args.get("model_instance_kind", ""),
            int(args.get("model_instance_device_id", "-1") or -1),
            args.get("model_instance_name", ""),
            configuration.world_size(engine_config),
            params.get("GPU_DEVICE_IDS"),
        )
        if visible is not None:
            log.info(f"[vllm] {args.get('model_instance_name')}: CUDA_VISIBLE_DEVICES={visible}")
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        return engine_config

    def _start_in_stub(self, version_dir: str) -> None:
        """vLLM's AsyncLLM on an event loop of this process's (the engine loop), with the threads that send."""
        # Up to one output chunk of streams in flight, the engine loop sends their responses itself (_deliver).
        self._inline_sends_up_to = self.vllm.output_chunk
        # vLLM's own OpenAI layer answers OpenAI requests (openai_serving.py); openai.json is checked now.
        self._openai = openai_serving.OpenAIServing(
            self.model_name, version_dir, self.vllm, self.engine_args, self.lora_adapters, self._pump_openai
        )
        openai_at_load = self._openai.check_options()
        # First and final responses (and OpenAI finals): the start or end of a request, which a client waits on.
        self._edge_sends = [sends.SendThread(f"vllm-sends-edge-{i}") for i in range(sends.EDGE_SEND_THREADS)]
        self._sends = self._edge_sends[0]  # for answers that belong to no stream (OpenAI finals, errors)
        self._stream_sends = [sends.SendThread(f"vllm-sends-{i}") for i in range(sends.STREAM_SEND_THREADS)]
        self._spawned = 0
        self._accumulator = metrics.MetricsAccumulator(self.per_value_histograms) if self.report_metrics else None
        self._live: dict[str, jobs.Job | jobs.OpenAIJob] = {}
        self._dead_reason: str | None = None
        # Only this run's lines of the server log can say why its engine died.
        self._log_start = environment.log_size(environment.server_log_file())
        self._closing = False
        self._loop = environment.new_engine_loop()
        self._loop_thread = threading.Thread(target=self._run_loop, name="vllm-engine-loop", daemon=True)
        self._loop_thread.start()
        try:
            future = asyncio.run_coroutine_threadsafe(self._start_engine(), self._loop)
            self.engine = future.result()
        except BaseException:
            self._stop_loop()
            raise
        self._render = environment.prompt_renderer(self.engine)
        self._openai.start(self._loop, self.engine)
        self._metrics = self._triton_metrics()
        self._stop_watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="vllm-watch", daemon=True)
        self._watcher.start()
        log.info(f"[vllm] {environment.freeze_startup_heap()} {environment.FROZEN_HEAP_LOG}")
        if openai_at_load:
            asyncio.run_coroutine_threadsafe(self._openai.build_at_load(), self._loop).result()

    def _triton_metrics(self) -> metrics_report.TritonMetrics | None:
        if self._accumulator is None:
            return None
        try:
            return metrics_report.TritonMetrics(
                self._metric_labels,
                self.engine.model_config.max_model_len,
                self._accumulator,
                self.per_value_histograms,
            )
        except Exception as exc:  # e.g. the server runs with metrics off
            log.warn(f"[vllm] REPORT_CUSTOM_METRICS is on but metrics are unavailable: {exc}")
            return None

    @staticmethod
    def _admit_soon() -> None:
        sys.setswitchinterval(ADMISSION_SWITCH_INTERVAL_S)  # for the whole process: a stub serves one model instance
        log.info(f"[vllm] {SWITCH_INTERVAL_LOG} {sys.getswitchinterval() * 1e3:g} ms: execute() admits soon")

    # -- the engine loop ------------------------------------------------------------------------------------------
    def _run_loop(self) -> None:
        log.name_os_thread("vllm-engine-loop")
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _start_engine(self) -> Any:
        stat_loggers = metrics.stat_loggers(self._accumulator)
        # Built inside the loop, so vLLM's output handler runs on it next to the request tasks that send responses.
        return self.vllm.AsyncLLM.from_engine_args(self.engine_args, stat_loggers=stat_loggers or None)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=30)

    def _watch(self) -> None:
        """Checks in-flight requests for client cancellation, and the engine for death.

        Runs on its own thread: every ``is_cancelled()`` is a round trip to the server process (the GIL is released
        while it waits), which would otherwise stall the engine loop that feeds vLLM and sends responses. Requests
        whose gateway tells of cancellation over its stream socket are not asked about: at 128 streams that was
        over a thousand round trips a second, each one a wait for the GIL once it returns.
        """
        while not self._stop_watching.wait(WATCH_INTERVAL_S):
            self._sweep()

    def _sweep(self) -> None:
        live = [j for j in list(self._live.values()) if not (isinstance(j, jobs.OpenAIJob) and j.watched_by_link)]
        budget = max(1, int(WATCH_CHECKS_PER_S * WATCH_INTERVAL_S))
        live, self._sweep_from = jobs.next_to_check(live, budget, getattr(self, "_sweep_from", 0))
        for job in live:
            if jobs.client_cancelled(job):
                self._loop.call_soon_threadsafe(self._cancel, job, "request was cancelled")
        if self._dead_reason is None and not self._closing and self.engine.errored:
            self._loop.call_soon_threadsafe(self._on_engine_dead)

    def _cancel(self, job: jobs.Job | jobs.OpenAIJob, reason: str) -> None:
        if job.finished or job.task is None or job.task.done():
            return
        if isinstance(job, jobs.OpenAIJob):
            self._openai.cancel(job, reason)
            return
        if job.cancel_reason is None and reason == "request was cancelled":
            log.info(f"[vllm] Cancelling the request {job.request_id}")
        job.cancel_reason = job.cancel_reason or reason
        job.task.cancel()

    def _on_engine_dead(self) -> None:
        if self._dead_reason is not None or self._closing:
            return
        cause = environment.death_cause_in_server_log(self._log_start)
        self._dead_reason = engine_link.engine_death(self.model_name, self.health_check, cause)
        for job in list(self._live.values()):
            if isinstance(job, jobs.OpenAIJob):
                continue  # vLLM's OpenAI layer gets the engine's death from the engine and answers as vllm serve does
            if job.task is not None and not job.task.done():
                job.cancel_reason = self._dead_reason
                job.task.cancel()
        if self._metrics is not None:
            assert self._accumulator is not None  # the metrics are made only around an accumulator
            self._accumulator.release_held()  # no stats will come from a dead engine

    # -- execute --------------------------------------------------------------------------------------------------
    def execute(self, requests: Sequence[Any]) -> None:
        if self._process is not None:
            self._process.execute(requests)
            return None
        # Triton hands this instance its requests one execute() at a time, and the next only once this returns: every
        # moment here delays every request behind it. So the requests go to the engine loop as they are, to be read
        # there (_admit): parsed here, a burst of requests waited for each other to get in, and each stream's next
        # request as long (bench/results/backend.md, "Admission").
        if _hop is not _no_hop:
            hops.executed(requests)
        self._loop.call_soon_threadsafe(self._admit, requests)
        return None

    def _admit(self, requests: Sequence[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            openai_request = native.first_element(jobs.input_array(request, "openai_request"))
            if openai_request is not None:
                self._execute_openai(sender, openai_request)
                continue
            if self._dead_reason is not None:
                self._send_error(sender, self._dead_reason, "UNAVAILABLE")
                continue
            if self._closing:
                self._send_error(sender, "the model is being unloaded", "UNAVAILABLE")
                continue
            job = jobs.read_native(self._reader, request, sender, self.one_response_per_token)
            if job is None:
                continue
            self._spawn(job)

    def _spawn(self, job: jobs.Job) -> None:
        self._live[job.request_id] = job
        if _hop is not _no_hop:
            hops.admitted(job.request_id, job.request)
        job.stream_sends = self._stream_sends[self._spawned % len(self._stream_sends)]
        job.edge_sends = self._edge_sends[self._spawned % len(self._edge_sends)]
        self._spawned += 1
        if self._metrics is not None:
            assert self._accumulator is not None  # the metrics are made only around an accumulator
            self._accumulator.expect(job.request_id, job.options.n)
        job.task = environment.start_task(self._loop, self._generate(job))

    async def _generate(self, job: jobs.Job) -> None:
        try:
            prompt = job.prompt if self._render is None else await self._render(job.prompt)
            if _hop is not _no_hop:
                _hop("E", job.request_id)
            stream = self.engine.generate(prompt, job.sampling_params, job.request_id, lora_request=job.lora_request)
            try:
                async for merged in stream:
                    if _hop is not _no_hop:
                        _hop("O", job.request_id)
                    for output in self._per_token(job, merged) if job.token_history is not None else (merged,):
                        if output.finished:
                            self._finish(job)
                        self._deliver(job, output)
                        if job.finished:
                            return
                        if job.sent is not None:
                            # The next output is read once this one is sent: vLLM merges what the engine made meanwhile.
                            await job.sent
            finally:
                # Closing vLLM's stream aborts the request in the engine if it is still running (e.g. a send
                # failed because the client went away): nothing keeps generating for it.
                await stream.aclose()
            if not job.finished:  # the stream ended without a finished output (aborted inside vLLM)
                self._finish(job)
                self._deliver_error(job, "the request ended without a result (aborted by vLLM)", "INTERNAL")
        except asyncio.CancelledError:
            # vLLM's generate() has aborted the request in the engine on its way out.
            if not job.finished:
                self._finish(job)
                reason = job.cancel_reason or "request was cancelled"
                code = "CANCELLED" if reason == "request was cancelled" else "UNAVAILABLE"
                if code == "CANCELLED":
                    log.info(f"[vllm] request {job.request_id} cancelled by the client: aborted in the engine")
                    # The words of Triton's own vLLM backend, which scripts look for.
                    log.info(f"[vllm] Successfully cancelled the request {job.request_id}")
                self._deliver_error(job, reason, code)
        except Exception as exc:
            if not job.finished:
                self._finish(job)
                message, code = self._describe(exc)
                self._deliver_error(job, message, code)
        finally:
            self._live.pop(job.request_id, None)
            if self._metrics is not None:
                assert self._accumulator is not None  # the metrics are made only around an accumulator
                self._accumulator.forget(job.request_id)

    def _per_token(self, job: jobs.Job, output: Any) -> list[Any]:
        """STREAM_ONE_RESPONSE_PER_TOKEN: the stream's merged output as one output per token (per_token.py)."""
        assert job.token_history is not None  # kept only for the streams this applies to
        return per_token.split(output, per_token.decoder(self.engine, job.sampling_params), job.token_history)

    @staticmethod
    def _finish(job: jobs.Job | jobs.OpenAIJob) -> None:
        with job.lock:  # waits for a cancellation check in flight on the watcher thread
            job.finished = True

    def _deliver(self, job: jobs.Job, output: Any) -> None:
        # Up to one output chunk of streams, the loop sends: vLLM's handler never yields mid-step then, a send lets
        # the other streams' outputs pile up and merge, and no thread hand-off is paid (on 2 CPU cores it cost 0.65x
        # against 0.70x raw at 32 streams). Above it, the loop only queues, and the send thread builds the response and
        # makes the round trip (sends.SendThread). A request's next send waits for its last either way: never reordered.
        first, job.first = job.first, False
        inline = len(self._live) <= self._inline_sends_up_to
        if not output.finished:
            if inline:
                job.sent = None
                self._send_response(job, output, first)
            else:
                job.sent = self._loop.create_future()
                job.last_sends = (job.edge_sends or self._sends) if first or not job.stream_sends else job.stream_sends
                job.last_sends.submit(functools.partial(self._send_response, job, output, first), job.sent)
        elif self._metrics is not None:
            # The final response goes out from the metrics thread, after the request's stats have been reported:
            # a scrape right after the answer sees the request. One hand-off per request, none per token. The
            # response before it has been sent: this output was read after it.
            final = functools.partial(self._send_final, job, output, first)
            assert self._accumulator is not None  # the metrics are made only around an accumulator
            self._accumulator.send_final_after_stats(job.request_id, final)
        elif inline:
            self._send_final(job, output, first)
        else:
            job.last_sends = job.edge_sends or self._sends
            job.last_sends.submit(functools.partial(self._send_final, job, output, first))

    def _send_response(self, job: jobs.Job, output: Any, first: bool) -> None:
        job.sender.send(self._response(job, output, first), flags=0)
        if _hop is not _no_hop:
            _hop("S", job.request_id)

    def _send_final(self, job: jobs.Job, output: Any, first: bool) -> None:
        try:
            job.sender.send(
                self._response(job, output, first), flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
            if _hop is not _no_hop:
                _hop("F", job.request_id)
        except Exception as exc:  # the client may be gone already
            log.warn(f"[vllm] could not send a final response: {exc}")

    def _deliver_error(self, job: jobs.Job, message: str, code: str) -> None:
        # Behind any response of the request still queued: the error is its final one.
        thread = job.last_sends or job.edge_sends or self._sends
        thread.submit(functools.partial(self._send_error, job.sender, message, code))

    @staticmethod
    def _response(job: jobs.Job, output: Any, first: bool) -> Any:
        return sends.native_response(job.options, output, first)

    def _describe(self, exc: BaseException) -> tuple[str, str]:
        name = type(exc).__name__
        if name == "EngineDeadError" or (self.engine is not None and self.engine.errored):
            if self._dead_reason is None:
                self._on_engine_dead()
            return self._dead_reason or "the vLLM engine has died", "UNAVAILABLE"
        cause = exc.__cause__ if name == "EngineGenerateError" and exc.__cause__ is not None else exc
        if isinstance(cause, (ValueError, TypeError)) or "Validation" in type(cause).__name__:
            return f"invalid request: {native.validation_field(cause)}: {cause}", "INVALID_ARG"
        log.error(f"[vllm] request failed: {''.join(traceback.format_exception(cause))}")
        return f"generation failed: {type(cause).__name__}: {cause}", "INTERNAL"

    _send_error = staticmethod(sends.send_error)

    # -- OpenAI requests: vLLM's own OpenAI layer (the app `vllm serve` runs) on this model's engine ----------------
    def _execute_openai(self, sender: Any, raw: Any) -> None:
        alive = self._dead_reason is None and not self._closing and not getattr(self.engine, "errored", True)
        admitted = openai_serving.admit(raw, self._dead_reason, self._closing, alive)
        if isinstance(admitted, openai_serving.OpenAIOutput):
            self._answer_openai_now(sender, admitted.status, admitted.data)
            return
        if _hop is not _no_hop:
            hops.openai_admitted(admitted.stream_to.id if admitted.stream_to is not None else -1)
        self._spawn_openai(openai_serving.new_job(sender, jobs.new_request_id(), admitted))

    def _answer_openai_now(self, sender: Any, status: int, data: bytes) -> None:
        sends.send_openai_final(sender, status, data)

    def _spawn_openai(self, job: jobs.OpenAIJob) -> None:
        self._live[job.request_id] = job
        job.task = environment.start_task(self._loop, self._serve_openai(job))

    async def _serve_openai(self, job: jobs.OpenAIJob) -> None:
        try:
            await self._openai.serve(job)
        finally:
            self._live.pop(job.request_id, None)

    def _pump_openai(self, job: jobs.OpenAIJob) -> None:
        """Send what is pending, unless a send of this request is in flight (its completion pumps again)."""
        item = job.joiner.take()
        if item is not None:
            self._send_openai(job, *item)

    def _send_openai(self, job: jobs.OpenAIJob, data: bytes, final: bool) -> None:
        # Chunks on the engine loop, as native responses go (a pool of send threads measured 0.6-0.75x of this at 32
        # streams on 2 cores): while a send waits on its round trip, the other streams' chunks queue up, and this
        # stream's are joined into its next response once the loop runs the callback below. The final, sent when no
        # chunk is in flight, goes to the send thread: the loop does not wait for it.
        assert job.status is not None  # set before any bytes are pushed: by the app's response start, or on failure
        try:
            if final:
                self._finish(job)  # as for native requests: no cancellation check on a freed request
                if job.error is not None:
                    self._sends.submit(functools.partial(self._send_error, job.sender, *job.error))
                else:
                    response = sends.openai_response(job.status, data)
                    flags = stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    self._sends.submit(functools.partial(job.sender.send, response, flags=flags))
            else:
                job.sender.send(sends.openai_response(job.status, data), flags=0)
        except Exception as exc:  # the client may be gone: stop generating for it
            log.warn(f"[vllm] could not send an OpenAI response: {exc}")
            if not final:
                self._loop.call_soon(self._cancel, job, jobs.send_failure_reason(job))
        finally:
            if not final:
                self._loop.call_soon(self._openai_sent, job)

    def _openai_sent(self, job: jobs.OpenAIJob) -> None:
        job.joiner.sent()
        self._pump_openai(job)

    # -- finalize -------------------------------------------------------------------------------------------------
    def finalize(self) -> None:
        log.info(f"[vllm] finalizing model {self.model_name}")
        hops.flush()
        process = getattr(self, "_process", None)
        if process is not None:
            process.finalize()
            return
        self._closing = True
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            self._stop_watching.set()
            watcher.join(timeout=5)
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():

            async def cancel_all() -> None:
                tasks = []
                for job in list(self._live.values()):
                    if job.task is not None and not job.task.done():
                        job.cancel_reason = job.cancel_reason or "the model is being unloaded"
                        job.task.cancel()
                        tasks.append(job.task)
                if tasks:
                    await asyncio.wait(tasks, timeout=10)
                # Then the final responses of the cancelled requests, and the connections to gateways: each one's
                # reader ends, and the gateway sees EOF.
                threads = [*getattr(self, "_edge_sends", ()), *getattr(self, "_stream_sends", ())]
                for thread in threads:
                    thread.stop()
                if threads:
                    sent, seconds = sum(t.sends for t in threads), sum(t.send_seconds for t in threads)
                    log.info(f"[vllm] {sent} responses sent, {seconds:.2f} s in round trips to the server")
                openai = getattr(self, "_openai", None)
                if openai is not None:
                    await openai.close_links()

            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=15)
            except Exception as exc:
                log.warn(f"[vllm] cancelling in-flight requests at finalize: {exc}")
        engine = getattr(self, "engine", None)
        if engine is not None:
            handler = getattr(engine, "output_handler", None)
            if handler is not None and loop is not None and loop.is_running():
                # Stopped first, or it reports the engine core it is reading from as dead while it shuts down.
                loop.call_soon_threadsafe(handler.cancel)
            try:
                # Stops the EngineCore process and its workers, and vLLM's IPC; what is left after the grace is killed.
                killed, removed = engine_stop.stop_within(engine.shutdown, ENGINE_STOP_GRACE_S)
                if killed:
                    log.info(
                        f"[vllm] the engine had not stopped after {ENGINE_STOP_GRACE_S:g} s: {len(killed)} of its "
                        f"processes killed, {len(removed)} shared-memory segments of theirs removed"
                    )
            except Exception as exc:
                log.warn(f"[vllm] engine shutdown: {exc}")
            self.engine = None
        metrics = getattr(self, "_metrics", None)
        if metrics is not None:
            metrics.stop()
        if loop is not None:
            self._stop_loop()
        log.info(f"[vllm] model {self.model_name} finalized")
