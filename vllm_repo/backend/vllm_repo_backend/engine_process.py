"""vLLM's AsyncLLM in a process of its own, for config.pbtxt's ENGINE_PROCESS: the process the stub starts
(engine_link.py is the stub's side). It runs the engine, vLLM's output handler and the prompt renderer on its own
loop, with its own GIL, and sends each loop turn's outputs to the stub as one message; the stub only reads
requests, sends responses and watches for cancellations.

Why a process: in the stub, one GIL serves vLLM's output handler, every request's task and every send to the
server. On the H200 above 128 streams they held it about all the time while the engine waited, 0.90-0.94x raw
AsyncLLM at 256-512 streams; with vLLM's frontend in a process of its own, 0.98-1.00x (bench/results/backend.md).

    python -m vllm_repo_backend.engine_process SOCKET AUTHKEY_HEX VERSION_DIR [OPTIONS_JSON]

OPTIONS_JSON: ``{"metrics": true}`` records vLLM's stats for REPORT_CUSTOM_METRICS.

The messages, pickled over a Unix socket (multiprocessing.connection, authenticated with the key the stub made):

- from the stub: ``("add", id, prompt, sampling_params, lora_request, one_response_per_token)``;
  ``("sent", [id, ...])``: those requests' last responses went out, read their next outputs; ``("abort", id)``;
  ``("stop",)``;
- to the stub: ``("ready", description, max_model_len)`` or ``("failed", text)`` once; then
  ``("outputs", [(id, output, end), ...], stats)``, one per loop turn, where ``output`` is vLLM's RequestOutput (what
  the stream has not read yet; with one_response_per_token, one per new token, per_token.py) or None, and ``end`` is
  None, or ``(message, code)`` ending the request with a Triton error (code "" where the stub asked for the abort and
  knows why); ``stats`` is None, or what vLLM recorded since the last message (MetricsAccumulator.take(), which the
  stub merges and reports), also sent alone at METRICS_FLUSH_INTERVAL_S with no outputs; ``("dead", text)`` once the
  engine has died.

A request's next output is read only once the stub says its last response went out: vLLM merges what the engine
made meanwhile into one output, so a stream's responses grow fewer as the load grows, as in the stub.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import traceback
from multiprocessing.connection import Connection, Listener
from typing import Any

from . import configuration, contract, engine_stop, environment, metrics, native, per_token

# How often the engine is checked for death (the stub's own watcher does it every 0.1 s in process).
DEATH_CHECK_S = 0.1
# How long finalize's stop waits for vLLM's engine to stop in order before killing what is left (engine_stop.py).
ENGINE_STOP_GRACE_S = 1.0


class EngineFrontend:
    """The requests in flight in this process, and the one message per loop turn that carries their outputs."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        conn: Connection,
        engine: Any,
        accumulator: metrics.MetricsAccumulator | None = None,
    ) -> None:
        self.loop, self.conn, self.engine, self.accumulator = loop, conn, engine, accumulator
        self.render = environment.prompt_renderer(engine)
        self.tasks: dict[str, asyncio.Task] = {}
        self.sent: dict[str, asyncio.Future] = {}
        self.outbox: list[tuple[str, Any, tuple[str, str] | None]] = []
        self.flushing = False
        self.send_lock = threading.Lock()  # the reader thread answers too (a failed start, the death message)

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
            engine_input = prompt if self.render is None else await self.render(prompt)
            stream = self.engine.generate(engine_input, params, key, lora_request=lora_request)
            decode = per_token.decoder(self.engine, params) if split_tokens else None
            history: dict[int, list[int]] = {}
            try:
                async for output in stream:
                    if decode is None:
                        self.put(key, output)
                    else:
                        for piece in per_token.split(output, decode, history):
                            self.put(key, piece)
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

    def on_message(self, message: tuple) -> None:
        kind = message[0]
        if kind == "add":
            _, key, prompt, params, lora_request, split_tokens = message
            self.tasks[key] = environment.start_task(
                self.loop, self.generate(key, prompt, params, lora_request, split_tokens)
            )
        elif kind == "sent":
            for key in message[1]:
                waiting = self.sent.get(key)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
        elif kind == "abort":
            task = self.tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "stop":
            self.loop.stop()

    async def watch_engine(self) -> None:
        while not self.engine.errored:
            await asyncio.sleep(DEATH_CHECK_S)
        self.post(("dead", "the engine reports an error"))


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
    accumulator = metrics.MetricsAccumulator() if options.get("metrics") else None
    _die_with_parent()
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

        async def start() -> Any:  # inside the loop: vLLM's output handler runs on it
            return vllm.AsyncLLM.from_engine_args(engine_args, stat_loggers=metrics.stat_loggers(accumulator) or None)

        engine = loop.run_until_complete(start())
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        return 1
    frontend = EngineFrontend(loop, conn, engine, accumulator)

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
    for task in list(frontend.tasks.values()):
        task.cancel()
    handler = getattr(engine, "output_handler", None)
    if handler is not None:
        handler.cancel()  # first, or it reports the engine core it reads from as dead while that shuts down
    engine_stop.stop_within(engine.shutdown, ENGINE_STOP_GRACE_S)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
