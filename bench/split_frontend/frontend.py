"""The frontend process of the split_frontend experiment (model.py says what it is for): AsyncLLM with the model's
engine arguments, fed by the stub's messages, answering with one message per loop turn.

    python frontend.py SOCKET AUTHKEY_HEX ENGINE_ARGS_JSON

Messages from the stub: ("add", key, prompt, sampling parameters), ("sent", [keys]) (those requests' last responses
went out: read their next outputs), ("abort", key), ("stop",). To the stub: ("ready",) or ("error", text) once, then
lists of (key, new text, new tokens, finished, error text or None).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import traceback
from multiprocessing.connection import Listener
from typing import Any


def main() -> int:
    address, authkey, settings = sys.argv[1], bytes.fromhex(sys.argv[2]), json.loads(sys.argv[3])
    listener = Listener(address, family="AF_UNIX", authkey=authkey)
    conn = listener.accept()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.async_llm import AsyncLLM

        async def start() -> Any:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**{"disable_log_stats": True, **settings}))

        engine = loop.run_until_complete(start())
    except Exception:
        conn.send(("error", traceback.format_exc()))
        return 1
    conn.send(("ready",))

    outbox: list[tuple] = []
    tasks: dict[int, asyncio.Task] = {}
    sent: dict[int, asyncio.Future] = {}
    flushing = False

    def flush() -> None:
        nonlocal flushing, outbox
        flushing = False
        if outbox:
            batch, outbox = outbox, []
            conn.send(batch)

    def put(item: tuple) -> None:
        nonlocal flushing
        outbox.append(item)
        if not flushing:  # once per loop turn: the outputs of one engine step go together
            flushing = True
            loop.call_soon(flush)

    async def run(key: int, prompt: str, params: dict) -> None:
        try:
            sampling = SamplingParams(**params, output_kind=RequestOutputKind.DELTA)
            async for output in engine.generate(prompt, sampling, str(key)):
                completion = output.outputs[0]
                put((key, completion.text, len(completion.token_ids), output.finished, None))
                if output.finished:
                    return
                sent[key] = loop.create_future()
                await sent[key]
        except asyncio.CancelledError:
            pass  # aborted: generate() aborts the request in the engine on its way out
        except Exception as exc:
            put((key, "", 0, True, f"{type(exc).__name__}: {exc}"))
        finally:
            tasks.pop(key, None)
            sent.pop(key, None)

    def on_message(message: tuple) -> None:
        kind = message[0]
        if kind == "add":
            _, key, prompt, params = message
            tasks[key] = loop.create_task(run(key, prompt, params))
        elif kind == "sent":
            for key in message[1]:
                waiting = sent.get(key)
                if waiting is not None and not waiting.done():
                    waiting.set_result(None)
        elif kind == "abort":
            task = tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "stop":
            loop.stop()

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = ("stop",)
            loop.call_soon_threadsafe(on_message, message)
            if message[0] == "stop":
                return

    threading.Thread(target=read, name="frontend-read", daemon=True).start()
    loop.run_forever()
    engine.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
