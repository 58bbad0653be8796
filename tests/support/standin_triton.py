"""A stand-in for Triton's gRPC side behind the real aiohttp application of the OpenAI gateway, and an aiohttp test
client for it."""

from __future__ import annotations

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer

from vllm_repo.serve.openai.app import OpenAIGateway
from vllm_repo.serve.openai.triton import (
    Chunk,
    TritonUnavailable,
)


class StandInTriton:
    """Answers like Triton with the bundled backend: each model lists one card, generation replays ``script``."""

    def __init__(self, models=("tiny",), cards=None, script=None, ready=True):
        self.models = list(models)
        self.cards = cards or {m: [{"id": m, "object": "model"}] for m in self.models}
        self.script = script or {}
        self.ready = ready
        self.health: dict[str, int] = {}  # a model's backend's answer to /health (200 when not given)
        self.calls: list[tuple[str, str, object]] = []
        self.headers: list[list[list[str]] | None] = []  # the client headers each call passed on
        self.closed_early = asyncio.Event()

    async def server_ready(self):
        return self.ready

    async def openai_models(self):
        return list(self.models)

    async def close(self):
        pass

    async def call(self, model, endpoint, body=None, headers=None):
        self.calls.append((model, endpoint, body))
        self.headers.append(headers)
        if model not in self.models:
            raise TritonUnavailable(f"Request for unknown model: '{model}' is not found")
        if endpoint == "/v1/models":
            yield Chunk(200, json.dumps({"object": "list", "data": self.cards[model]}).encode(), True)
            return
        if endpoint == "/health":
            yield Chunk(self.health.get(model, 200), b"", True)
            return
        finished = False
        try:
            for item in self.script.get(model, [Chunk(200, b"{}", True)]):
                if isinstance(item, Exception):
                    raise item
                if item == "wait":
                    await asyncio.sleep(30)
                    continue
                yield item
            finished = True
        finally:
            if not finished:
                self.closed_early.set()


async def _client(triton, keys=None, metrics=None) -> TestClient:
    client = TestClient(TestServer(OpenAIGateway(triton, keys, metrics_url=metrics).application()))
    await client.start_server()
    return client


def run(coro):
    return asyncio.run(coro)
