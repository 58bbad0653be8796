"""Which moments bench's OpenAI client times, against a scripted SSE server on 127.0.0.1: the first token is the first
chunk that carries text (not the response's headers, not a chat stream's role chunk), the gaps are those between text
chunks, the end is the last text chunk (not the usage chunk after it), and the token count is the usage's. The
end-to-end comparison with vLLM's own client (test_bench_e2e.py) can only bound these within what two shared cores
allow; here each moment is apart from the next by far more than the scheduling noise."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from vllm_repo.benchmark.clients import OpenAIClient

# Seconds between the server's writes: headers, (role chunk), first text, second text, usage.
BEFORE_ROLE, BEFORE_FIRST_TEXT, BETWEEN_TEXTS, BEFORE_USAGE = 0.3, 0.3, 0.25, 0.6
# How late a chunk may be read after it was written, on a loaded machine: well under each gap above.
LATE = 0.15


def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> bytes:
    event: dict[str, Any] = {"id": "x", "choices": choices}
    if usage is not None:
        event["usage"] = usage
    return b"data: " + json.dumps(event).encode() + b"\n\n"


async def stream(request: web.Request) -> web.StreamResponse:
    chat = request.path.endswith("/chat/completions")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)  # the headers go now
    await asyncio.sleep(BEFORE_ROLE)
    if chat:
        await response.write(chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}]))
    await asyncio.sleep(BEFORE_FIRST_TEXT)
    for index, text in enumerate(("Hello", " world")):
        if index:
            await asyncio.sleep(BETWEEN_TEXTS)
        choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
        await response.write(chunk([choice]))
    await asyncio.sleep(BEFORE_USAGE)
    await response.write(chunk([], usage={"prompt_tokens": 7, "completion_tokens": 2}))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def timed(chat: bool) -> Any:
    app = web.Application()
    app.router.add_post("/v1/completions", stream)
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = OpenAIClient(f"http://127.0.0.1:{port}/v1", "m", chat=chat)
    await client.open()
    try:
        return await client.send("a prompt", 2)
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_the_first_token_is_the_first_text_chunk_and_the_end_the_last_one(chat):
    record = asyncio.run(timed(chat))
    assert record.ok, record.error
    first_text = BEFORE_ROLE + BEFORE_FIRST_TEXT
    # Not the headers (at 0), not the role chunk (BEFORE_ROLE): the first chunk with text.
    assert first_text <= record.ttft < first_text + LATE
    assert len(record.itl) == 1 and BETWEEN_TEXTS - LATE < record.itl[0] < BETWEEN_TEXTS + LATE
    # The last text chunk, not the usage chunk BEFORE_USAGE after it.
    last_text = first_text + BETWEEN_TEXTS
    assert last_text <= record.e2e < last_text + LATE
    assert (record.output_tokens, record.input_tokens) == (2, 7)
