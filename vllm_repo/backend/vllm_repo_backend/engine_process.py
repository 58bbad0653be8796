"""vLLM's AsyncLLM in a process of its own, for config.pbtxt's ENGINE_PROCESS: the process the stub starts
(engine_link.py is the stub's side). It runs the engine, vLLM's output handler and the prompt renderer on its own
loop, with its own GIL, and sends each loop turn's outputs to the stub as one message; the stub only reads
requests, sends responses and watches for cancellations.

Why a process: in the stub, one GIL serves vLLM's output handler, every request's task and every send to the
server. On the H200 above 128 streams they held it about all the time while the engine waited, 0.90-0.94x raw
AsyncLLM at 256-512 streams; with vLLM's frontend in a process of its own, 0.98-1.00x (bench/results/backend.md).

    python -m vllm_repo_backend.engine_process SOCKET AUTHKEY_HEX VERSION_DIR [OPTIONS_JSON]

OPTIONS_JSON: ``{"model_name": ..., "metrics": true, "per_value_histograms": false, "lora_adapters": {name: path}}``:
the name OpenAI requests serve the model as, whether vLLM's stats are recorded (REPORT_CUSTOM_METRICS) and their
values kept (REPORT_HISTOGRAMS_PER_VALUE), multi_lora.json's adapters.

The messages, pickled over a Unix socket (multiprocessing.connection, authenticated with the key the stub made):

- from the stub: ``("add", id, prompt, sampling_params, lora_request, one_response_per_token)``;
  ``("openai", id, envelope)``: an OpenAI request for vLLM's app (openai_wire.OpenAIEnvelope);
  ``("sent", [id, ...])``: those requests' last responses went out, send their next; ``("abort", id, reason)``;
  ``("stop",)``;
- to the stub: ``("ready", description, max_model_len)`` or ``("failed", text, kind)`` once (kind "config": the
  model's configuration is wrong, e.g. openai.json); then ``("outputs", [(id, output, end), ...], stats)``, one per
  loop turn, where ``output`` is what the stub reads of vLLM's RequestOutput (for_the_stub: what the stream has not
  read yet; with one_response_per_token, one per new token, per_token.py), an OpenAI request's bytes
  (openai_serving.OpenAIOutput), or None, and ``end`` is None, or ``(message, code)`` ending the request with a
  Triton error (code "" where the stub asked for the abort and knows why); ``stats`` is None, or what vLLM recorded
  since the last message (MetricsAccumulator.take(), which the stub merges and reports), also sent alone at
  METRICS_FLUSH_INTERVAL_S with no outputs; ``("dead", text)`` once the engine has died (OpenAI requests are answered
  by vLLM's app then, as in the stub).

A request's next output is read only once the stub says its last response went out: vLLM merges what the engine
made meanwhile into one output, so a stream's responses grow fewer as the load grows, as in the stub. An OpenAI
answer's bytes wait likewise and go joined (openai_wire.SseJoiner); a streamed one whose gateway named its stream
socket goes there from this process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection, Listener
from typing import Any

from . import (
    configuration,
    contract,
    engine_stop,
    environment,
    errors,
    hops,
    jobs,
    log,
    metrics,
    native,
    openai_serving,
    per_token,
)

# The hop benchmarks' timestamps (hops.py), P, E and O here, the others in the stub (engine_link.py).
_hop, _no_hop = hops.hop, hops.off
# How often the engine is checked for death (the stub's own watcher does it every 0.1 s in process).
DEATH_CHECK_S = 0.1
# How long finalize's stop waits for vLLM's engine to stop in order before killing what is left (engine_stop.py).
ENGINE_STOP_GRACE_S = 1.0


class EngineFrontend:
    """The requests in flight in this process, and the one message per loop turn that carries their outputs."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, conn: Connection, accumulator: metrics.MetricsAccumulator | None = None
    ) -> None:
        self.loop, self.conn, self.accumulator = loop, conn, accumulator
        self.engine: Any = None
        self.openai: openai_serving.OpenAIServing | None = None
        self.render: Any = None
        self.tasks: dict[str, asyncio.Task] = {}
        self.sent: dict[str, asyncio.Future] = {}
        self.openai_jobs: dict[str, jobs.OpenAIJob] = {}
        self.outbox: list[tuple[str, Any, tuple[str, str] | None]] = []
        self.flushing = False
        self.send_lock = threading.Lock()  # the reader thread answers too (a failed start, the death message)

    def start(self, engine: Any, openai: openai_serving.OpenAIServing) -> None:
        """vLLM is up: requests may come."""
        self.engine, self.openai, self.render = engine, openai, environment.prompt_renderer(engine)
        openai.start(self.loop, engine)

    def post(self, message: tuple) -> None:
        with self.send_lock:
            self.conn.send(message)

    def put(self, key: str, output: Any, end: tuple[str, str] | None = None) -> None:
        self.outbox.append((key, output, end))
        if not self.flushing:  # once per loop turn: the outputs of one engine step go together
            self.flushing = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flushing = False
        if self.outbox:
            batch, self.outbox = self.outbox, []
            self._post_outputs(batch)

    def _post_outputs(self, batch: list) -> None:
        # A turn's stats go with its outputs, ahead of them: a final response waits in the stub until its request's
        # stats are reported (MetricsAccumulator.send_final_after_stats).
        stats = self.accumulator.take() if self.accumulator is not None else None
        if stats is not None:
            del stats["ready_finals"]  # none here: the stub holds the final responses
        try:
            self.post(("outputs", batch, stats))
        except OSError:  # the stub is gone: the reader thread stops the loop
            pass

    async def report_stats(self) -> None:
        """What vLLM recorded while no outputs went out (the gauges, a prefill step), every flush interval."""
        assert self.accumulator is not None  # started only with metrics
        while True:
            await asyncio.sleep(metrics.METRICS_FLUSH_INTERVAL_S)
            if self.accumulator.pending() and not self.flushing:
                self._post_outputs([])

    async def generate(self, key: str, prompt: Any, params: Any, lora_request: Any, split_tokens: bool) -> None:
        try:
            if _hop is not _no_hop:
                _hop("P", key)
            engine_input = prompt if self.render is None else await self.render(prompt)
            if _hop is not _no_hop:
                _hop("E", key)
            stream = self.engine.generate(engine_input, params, key, lora_request=lora_request)
            decode = per_token.decoder(self.engine, params) if split_tokens else None
            history: dict[int, list[int]] = {}
            first = True
            try:
                async for output in stream:
                    if _hop is not _no_hop:
                        _hop("O", key)
                    for piece in [output] if decode is None else per_token.split(output, decode, history):
                        self.put(key, for_the_stub(piece, first))
                        first = False
                    if output.finished:
                        return
                    waiting = self.sent[key] = self.loop.create_future()
                    await waiting  # until the stub has sent this output's response
            finally:
                # Closing vLLM's stream aborts the request in the engine if it is still running.
                await stream.aclose()
            self.put(key, None, ("the request ended without a result (aborted by vLLM)", "INTERNAL"))
        except asyncio.CancelledError:
            self.put(key, None, ("", ""))  # aborted as the stub asked: it knows why
        except Exception as exc:
            self.put(key, None, describe(exc, self.engine))
        finally:
            self.tasks.pop(key, None)
            self.sent.pop(key, None)

    # -- OpenAI requests: vLLM's app, as in the stub (openai_serving.py) -----------------------------------------
    async def serve_openai(self, job: jobs.OpenAIJob) -> None:
        assert self.openai is not None  # made at start
        try:
            await self.openai.serve(job)
        finally:
            if job.finished:  # else its last bytes wait for the stub's "sent", which finds it here
                self.openai_jobs.pop(job.request_id, None)

    def pump_openai(self, job: jobs.OpenAIJob) -> None:
        """What vLLM's app wrote for ``job`` and is not sent yet, to the stub: one response in flight at a time."""
        item = job.joiner.take()
        if item is None:
            return
        data, final = item
        assert job.status is not None  # set before any bytes are pushed
        if not final:
            self.put(job.request_id, openai_serving.OpenAIOutput(job.status, data, False))
            return
        job.finished = True
        if job.task is not None and job.task.done():
            self.openai_jobs.pop(job.request_id, None)
        if job.error is not None:
            self.put(job.request_id, None, job.error)
        else:
            self.put(job.request_id, openai_serving.OpenAIOutput(job.status, data, True))

    def on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "add":
            _, key, prompt, params, lora_request, split_tokens = message
            self.tasks[key] = environment.start_task(
                self.loop, self.generate(key, prompt, params, lora_request, split_tokens)
            )
        elif kind == "openai":
            job = openai_serving.new_job(None, message[1], message[2])
            self.openai_jobs[job.request_id] = job
            job.task = environment.start_task(self.loop, self.serve_openai(job))
        elif kind == "sent":
            for key in message[1]:
                waiting = self.sent.get(key)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
                openai_job = self.openai_jobs.get(key)
                if openai_job is not None:
                    openai_job.joiner.sent()
                    self.pump_openai(openai_job)
        elif kind == "abort":
            _, key, reason = message
            openai_job = self.openai_jobs.get(key)
            if openai_job is not None and self.openai is not None:
                self.openai.cancel(openai_job, reason)
            task = self.tasks.get(key)
            if task is not None:
                task.cancel()
        elif kind == "stop":
            self.loop.stop()

    async def watch_engine(self) -> None:
        while not self.engine.errored:
            await asyncio.sleep(DEATH_CHECK_S)
        self.post(("dead", "the engine reports an error"))


def for_the_stub(output: Any, first: bool) -> per_token.PieceOutput:
    """What the stub reads of one of a request's outputs (native.assemble_outputs), and no more: vLLM's RequestOutput
    repeats the prompt and its token ids in every output, about 1 KB of a 128-token prompt pickled each time, where
    the stub reads the prompt only with a request's first response (to prepend it) and of the ids only their count
    (num_input_tokens), sent as a range of it. A turn's message at 256 streams, a RequestOutput each, is about 280 KB,
    past a Unix socket's usual buffer (208 KB): the loop, vLLM's output handler with it, waits in the send until the
    stub has read part of it; trimmed, about 26 KB."""
    ids = output.prompt_token_ids
    return per_token.PieceOutput(
        output.prompt if first else None,
        None if ids is None else range(len(ids)),
        list(output.outputs),
        bool(output.finished),
    )


def describe(exc: BaseException, engine: Any) -> tuple[str, str]:
    """A request's failure as (message, Triton error code), as the stub describes its own."""
    name = type(exc).__name__
    if name == "EngineDeadError" or engine.errored:
        return "the vLLM engine has died", "DEAD"
    cause = exc.__cause__ if name == "EngineGenerateError" and exc.__cause__ is not None else exc
    if isinstance(cause, (ValueError, TypeError)) or "Validation" in type(cause).__name__:
        return f"invalid request: {native.validation_field(cause)}: {cause}", "INVALID_ARG"
    print(f"[vllm] request failed: {''.join(traceback.format_exception(cause))}", file=sys.stderr, flush=True)
    return f"generation failed: {type(cause).__name__}: {cause}", "INTERNAL"


def _log_to_stderr() -> None:
    """The backend's log lines (log.py: Python's logging outside the stub) to this process's stderr, which is the
    server's log, as Triton's logger would write them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname).1s%(asctime)s engine_process %(process)d] %(message)s"))
    logger = logging.getLogger("vllm_backend")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _die_with_parent() -> None:
    """SIGTERM when the stub dies (Linux): a stub killed outright must not leave this process holding the GPU."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    address, authkey, version_dir = argv[0], bytes.fromhex(argv[1]), argv[2]
    options = json.loads(argv[3]) if len(argv) > 3 else {}
    accumulator = (
        metrics.MetricsAccumulator(bool(options.get("per_value_histograms"))) if options.get("metrics") else None
    )
    _log_to_stderr()
    _die_with_parent()
    # A process group of its own: what vLLM starts from here (EngineCore, its workers) is killed with it when this
    # process dies outright, rather than left holding the GPU (engine_link.ProcessEngine._kill_group).
    os.setpgid(0, 0)
    parent = os.getppid()
    with Listener(address, family="AF_UNIX", authkey=authkey) as listener:  # before the engine: the stub waits on it
        conn = listener.accept()
    if os.getppid() != parent:
        return 1
    loop = environment.new_engine_loop()
    asyncio.set_event_loop(loop)
    try:
        vllm = environment.import_vllm()
        engine_args = configuration.build_engine_args(
            configuration.load_engine_config(version_dir),
            vllm.AsyncEngineArgs,
            vllm.version,
            os.path.join(version_dir, contract.ENGINE_ARGS_FILE),
        )
        frontend = EngineFrontend(loop, conn, accumulator)
        openai = openai_serving.OpenAIServing(
            options.get("model_name", "model"), version_dir, vllm, engine_args, options.get("lora_adapters"),
            frontend.pump_openai,
        )  # fmt: skip
        openai_at_load = openai.check_options()  # before the engine starts: a typo in openai.json fails at once

        async def start() -> Any:  # inside the loop: vLLM's output handler runs on it
            return vllm.AsyncLLM.from_engine_args(engine_args, stat_loggers=metrics.stat_loggers(accumulator) or None)

        engine = loop.run_until_complete(start())
        frontend.start(engine, openai)
        log.info(f"[vllm] {environment.freeze_startup_heap()} {environment.FROZEN_HEAP_LOG}")  # as in the stub
        if openai_at_load:
            loop.run_until_complete(openai.build_at_load())
    except errors.BackendConfigError as exc:
        conn.send(("failed", str(exc), "config"))
        return 1
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", "start"))
        return 1

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop",)
            loop.call_soon_threadsafe(frontend.on_message, message)
            if message[0] == "stop":
                return

    description = f"vLLM {vllm.version}{environment.kv_cache_text(engine)}, process {os.getpid()}"
    frontend.post(("ready", description, engine.model_config.max_model_len))
    threading.Thread(target=read, name="engine-process-read", daemon=True).start()
    watchers = [loop.create_task(frontend.watch_engine())]
    if accumulator is not None:
        watchers.append(loop.create_task(frontend.report_stats()))
    loop.run_forever()
    for watcher in watchers:
        watcher.cancel()
    for task in [*frontend.tasks.values(), *(job.task for job in frontend.openai_jobs.values() if job.task)]:
        task.cancel()
    loop.run_until_complete(openai.close_links())  # each gateway sees EOF
    handler = getattr(engine, "output_handler", None)
    if handler is not None:
        handler.cancel()  # first, or it reports the engine core it reads from as dead while that shuts down
    engine_stop.stop_within(engine.shutdown, ENGINE_STOP_GRACE_S)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
