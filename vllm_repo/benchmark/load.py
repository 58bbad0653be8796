"""Driving one load point: every prompt sent once, at a fixed concurrency or at a request rate.

- concurrency N: N requests in flight at all times until the prompts run out (a closed loop, as vllm bench serve's
  --max-concurrency with an infinite rate);
- request rate R: requests sent at the arrival times of a Poisson process of rate R (seeded), whatever is in
  flight (an open loop). As vllm bench serve does, the arrival times are scaled so that the last one falls at
  count / R: the sum of random gaps would otherwise stray a few percent from it, and the throughput with it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence

from vllm_repo.benchmark.clients import Client
from vllm_repo.benchmark.prompts import Prompt
from vllm_repo.benchmark.stats import RequestRecord

OnDone = Callable[[RequestRecord], None]


def arrival_times(count: int, rate: float, seed: int) -> list[float]:
    """Seconds from the start at which each of ``count`` requests is sent at ``rate`` per second on average."""
    rng = random.Random(seed)
    times, now = [], 0.0
    for _ in range(count):
        now += rng.expovariate(rate)
        times.append(now)
    scale = (count / rate) / times[-1] if times and times[-1] > 0 else 1.0
    return [t * scale for t in times]


async def run_concurrency(
    client: Client, prompts: Sequence[Prompt], concurrency: int, on_done: OnDone | None = None
) -> tuple[list[RequestRecord], float]:
    """Every prompt through ``concurrency`` workers; returns the records (in prompt order) and the wall time."""
    records: list[RequestRecord | None] = [None] * len(prompts)
    indices = iter(range(len(prompts)))

    async def worker() -> None:
        for i in indices:  # one shared iterator: each prompt goes to exactly one worker
            record = await client.send(prompts[i].text, prompts[i].output_len)
            records[i] = record
            if on_done:
                on_done(record)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
    return [r for r in records if r is not None], time.perf_counter() - start


async def run_rate(
    client: Client, prompts: Sequence[Prompt], rate: float, seed: int, on_done: OnDone | None = None
) -> tuple[list[RequestRecord], float]:
    """Every prompt sent at its Poisson arrival time; returns the records (in prompt order) and the wall time."""
    times = arrival_times(len(prompts), rate, seed)

    async def one(prompt: Prompt) -> RequestRecord:
        record = await client.send(prompt.text, prompt.output_len)
        if on_done:
            on_done(record)
        return record

    start = time.perf_counter()
    tasks = []
    for prompt, at in zip(prompts, times, strict=True):
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(prompt)))
    records = list(await asyncio.gather(*tasks))
    return records, time.perf_counter() - start
