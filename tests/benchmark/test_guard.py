"""bench's guard against a server that stops answering mid-run (its process died with streams open)."""

from __future__ import annotations

import asyncio
import time

import pytest

from vllm_repo.benchmark import BenchError
from vllm_repo.benchmark.clients import Activity
from vllm_repo.benchmark.run import guard


class FakeClient:
    url = "127.0.0.1:1"

    def __init__(self) -> None:
        self.activity = Activity()

    async def request(self, responses: int, gap_s: float) -> int:
        """A request whose server answers ``responses`` times, ``gap_s`` apart (never, for responses < 0)."""
        with self.activity.waiting():
            if responses < 0:
                await asyncio.Event().wait()
            for _ in range(responses):
                await asyncio.sleep(gap_s)
                self.activity.heard()
            return responses


def test_a_server_that_stops_answering_fails_the_run_and_leaves_no_request_waiting():
    client = FakeClient()

    async def main() -> None:
        await asyncio.gather(client.request(3, 0.05), client.request(-1, 0))

    began = time.monotonic()
    with pytest.raises(BenchError, match=r"has not answered for .* 1 request"):
        asyncio.run(guard(main(), client, stall_s=0.5))
    assert 0.5 <= time.monotonic() - began < 3
    assert client.activity.in_flight == 0  # the waiting request was cancelled


def test_a_slow_server_that_keeps_answering_is_not_a_stall():
    client = FakeClient()

    async def main() -> list[int]:
        return await asyncio.gather(client.request(12, 0.1), client.request(2, 0.55))

    # each request is silent longer than stall_s on its own, but the server as a whole never is
    assert asyncio.run(guard(main(), client, stall_s=0.3)) == [12, 2]


def test_time_with_nothing_in_flight_is_not_silence():
    activity = Activity()
    activity.last -= 100  # long idle between load points
    assert activity.silent_for() == 0.0
    with activity.waiting():
        assert activity.silent_for() < 1
    assert activity.in_flight == 0
