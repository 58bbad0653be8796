"""A whole benchmark: prompts made once, a warm-up, then each load point in turn; and the same against a repository
that bench launches itself (the server of `vllm-repo launch`, stopped after).

``bench(spec)`` returns a BenchRun whose ``report()`` is the JSON report; Ctrl-C stops between requests and keeps the
points measured so far (``interrupted``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from vllm_repo.benchmark.clients import ENDPOINTS, Client, make_client
from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.load import run_concurrency, run_rate
from vllm_repo.benchmark.prompts import Prompt, PromptSet, load_dataset, synthetic_prompts, take
from vllm_repo.benchmark.server_cpu import ServerCpu, total
from vllm_repo.benchmark.stats import RequestRecord, Slo, summarize

# vllm bench serve's random dataset: 1,024 tokens in, 128 out.
DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
DEFAULT_NUM_PROMPTS = 100
DEFAULT_WARMUP = 1
T = TypeVar("T")


@dataclasses.dataclass
class BenchSpec:
    """What to measure. Exactly one of ``concurrency`` and ``request_rates`` is a list (concurrency 1 when neither
    is given); ``dataset`` replaces the synthetic prompts (``input_len`` is then unused)."""

    model: str
    endpoint: str = "native"
    url: str | None = None
    concurrency: list[int] | None = None
    request_rates: list[float] | None = None
    num_prompts: int = DEFAULT_NUM_PROMPTS
    # Requests at each load point, in the order of loads(), where they differ (a long run at 1 stream costs minutes
    # that a point of 256 streams needs to fill its batch); None: num_prompts at every point.
    prompts_per_point: list[int] | None = None
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int | None = None  # DEFAULT_OUTPUT_LEN for synthetic prompts; the dataset's own lengths otherwise
    dataset: Path | None = None
    slo: Slo = dataclasses.field(default_factory=Slo)
    seed: int = 0
    warmup: int = DEFAULT_WARMUP
    api_key: str | None = None
    wait_s: float = 0.0  # how long to wait for the model to be ready first
    # How long the server may say nothing at all while requests wait before the run fails (guard): any response to
    # any request counts, so only a dead or hung server is that silent under load.
    stall_s: float = 180.0

    def loads(self) -> list[dict[str, Any]]:
        if self.request_rates:
            return [{"request_rate": r} for r in self.request_rates]
        return [{"concurrency": c} for c in self.concurrency or [1]]

    def prompts_at(self, point: int) -> int:
        """How many requests load point ``point`` sends."""
        return self.prompts_per_point[point] if self.prompts_per_point else self.num_prompts

    def point_offset(self, point: int) -> int:
        """Where load point ``point``'s prompts begin among one pass over every point."""
        return sum(self.prompts_at(i) for i in range(point))

    def prompts_per_pass(self) -> int:
        """The requests of one pass over every load point."""
        return self.point_offset(len(self.loads()))

    def check(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise BenchError(f"--endpoint {self.endpoint} is not one of {', '.join(ENDPOINTS)}")
        if self.concurrency and self.request_rates:
            raise BenchError("give --concurrency or --request-rate, not both")
        if any(c < 1 for c in self.concurrency or []):
            raise BenchError("--concurrency values must be at least 1")
        if any(not r > 0 for r in self.request_rates or []):
            raise BenchError("--request-rate values must be positive requests per second")
        for name, value in (("--num-prompts", self.num_prompts), ("--input-len", self.input_len)):
            if value < 1:
                raise BenchError(f"{name} must be at least 1, not {value}")
        if self.prompts_per_point is not None:
            if len(self.prompts_per_point) != len(self.loads()):
                raise BenchError(
                    f"--num-prompts gives {len(self.prompts_per_point)} numbers for {len(self.loads())} load points: "
                    "give one number, or one per load point"
                )
            if min(self.prompts_per_point) < 1:
                raise BenchError("--num-prompts values must be at least 1")
        if self.output_len is not None and self.output_len < 1:
            raise BenchError(f"--output-len must be at least 1, not {self.output_len}")
        if self.warmup < 0:
            raise BenchError(f"--warmup must be 0 or more, not {self.warmup}")


class Progress(Protocol):
    """What a reporter is told while the benchmark runs (report.py's terminal progress is one)."""

    def note(self, message: str) -> None: ...

    def start_point(self, label: str, total: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...

    def end_point(self, point: dict[str, Any]) -> None: ...


@dataclasses.dataclass
class BenchRun:
    spec: BenchSpec
    url: str = ""
    prompts: str = ""  # PromptSet.source
    notes: list[str] = dataclasses.field(default_factory=list)
    points: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    finished: bool = False
    interrupted: bool = False
    # The measured server's process groups, where bench launched it: its CPU is measured with the load's.
    server_leaders: list[int] = dataclasses.field(default_factory=list)

    def report(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "model": spec.model,
            "endpoint": spec.endpoint,
            "url": self.url,
            "prompts": self.prompts,
            "input_len": None if spec.dataset else spec.input_len,
            "output_len": spec.output_len if spec.dataset else spec.output_len or DEFAULT_OUTPUT_LEN,
            "num_prompts": spec.prompts_per_point or spec.num_prompts,
            "seed": spec.seed,
            "slo": spec.slo.given(),
            "notes": self.notes,
            "interrupted": self.interrupted,
            "points": self.points,
        }


async def measure_point(
    client: Client,
    prompts: list[Prompt],
    load: dict[str, Any],
    spec: BenchSpec,
    seed: int,
    on_done: Callable[[RequestRecord], None] | None,
) -> tuple[list[RequestRecord], float, float]:
    """One load point's requests: their records, the wall time, and the CPU seconds a second this process (the
    client) used meanwhile: near 1, one core of load generator is what limits the figures, not the server."""
    cpu = time.process_time()
    if "concurrency" in load:
        measured = run_concurrency(client, prompts, load["concurrency"], on_done)
    else:
        measured = run_rate(client, prompts, load["request_rate"], seed, on_done)
    records, wall = await guard(measured, client, spec.stall_s)
    return records, wall, round((time.process_time() - cpu) / wall, 3) if wall > 0 else 0.0


def label(load: dict[str, Any]) -> str:
    return f"concurrency {load['concurrency']}" if "concurrency" in load else f"rate {load['request_rate']:g}/s"


def bench(spec: BenchSpec, progress: Progress | None = None, run: BenchRun | None = None) -> BenchRun:
    """Measure every load point of ``spec`` against a running server. Ctrl-C ends it early with the points so far."""
    spec.check()
    run = run or BenchRun(spec)
    try:
        asyncio.run(_measure(spec, run, progress))
    except KeyboardInterrupt:
        run.interrupted = True
    return run


async def _measure(spec: BenchSpec, run: BenchRun, progress: Progress | None) -> None:
    client = make_client(spec.endpoint, spec.url, spec.model, spec.api_key)
    server_cpu = ServerCpu(run.server_leaders)
    run.url = client.url
    await client.open()
    try:
        await client.wait_ready(spec.wait_s)
        loads = spec.loads()
        prompt_set = await _prompts(spec, client, spec.warmup + spec.prompts_per_pass())
        run.prompts = prompt_set.source
        if prompt_set.note:
            run.notes.append(prompt_set.note)
            if progress:
                progress.note(prompt_set.note)
        prompts = prompt_set.prompts
        await guard(_warm_up(client, prompts[: spec.warmup], progress), client, spec.stall_s)
        for i, load in enumerate(loads):
            chosen = take(prompts, spec.warmup + spec.point_offset(i), spec.prompts_at(i))
            if progress:
                progress.start_point(label(load), len(chosen))
            on_done = progress.request_done if progress else None
            server_cpu.start()
            records, wall, client_cpu = await measure_point(client, chosen, load, spec, spec.seed + i, on_done)
            point = summarize(records, wall, load, spec.slo)
            point["client_cpu_s_per_s"] = client_cpu
            if roles := server_cpu.stop():
                point["server_cpu_by_role"] = roles
                point["server_cpu_s_per_s"] = total(roles)
            run.points.append(point)
            if progress:
                progress.end_point(point)
        run.finished = True
    finally:
        await client.close()


async def guard(work: Coroutine[Any, Any, T], client: Client, stall_s: float) -> T:
    """``work``, unless the server stops answering: no response to any request in flight for ``stall_s`` seconds
    (its process died mid-stream, it hangs) ends it with an error instead of a wait of REQUEST_TIMEOUT_S."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=min(5.0, stall_s))
            if done:
                return task.result()
            silent = client.activity.silent_for()
            if silent >= stall_s:
                raise BenchError(
                    f"the server at {client.url} has not answered for {silent:.0f} s with "
                    f"{client.activity.in_flight} request(s) waiting: it died or hangs",
                    hint="see the server's log",
                )
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _prompts(spec: BenchSpec, client: Client, count: int) -> PromptSet:
    if spec.dataset is not None:
        lines = load_dataset(spec.dataset, spec.output_len)
        note = None
        if len(lines) < count:
            note = (
                f"{spec.dataset} has {len(lines)} prompts for the {count} requests asked for (warm-up included): "
                "they are sent again, and a server with prefix caching answers repeats faster"
            )
        return PromptSet(take(lines, 0, count), str(spec.dataset), note)
    output_len = spec.output_len or DEFAULT_OUTPUT_LEN
    return await synthetic_prompts(count, spec.input_len, output_len, spec.seed, client.tokenizer())


async def _warm_up(client: Client, prompts: list[Prompt], progress: Progress | None) -> None:
    """Requests that are not measured, one at a time: the first requests to a server pay for what it sets up lazily.
    When every one of them fails the benchmark would measure nothing but failures: that is an error."""
    if not prompts:
        return
    if progress:
        progress.start_point("warm-up", len(prompts))
    records = []
    for prompt in prompts:
        record = await client.send(prompt.text, prompt.output_len)
        records.append(record)
        if progress:
            progress.request_done(record)
    if progress:
        progress.end_point({})
    if not any(r.ok for r in records):
        raise BenchError(
            f"every warm-up request to '{client.model}' at {client.url} failed: {records[0].error}",
            hint="check that the model can take --input-len plus --output-len tokens (its max_model_len)",
        )


# ---------------------------------------------------------------------------------------------------------------------
# bench REPO: launch, measure, stop
# ---------------------------------------------------------------------------------------------------------------------


def bench_repository(
    repository: Path,
    spec: BenchSpec,
    *,
    progress: Progress | None = None,
    out: TextIO | None = None,
    python: Path | None = None,
    ready_timeout: float = 900.0,
    log_path: Path | None = None,
    on_plan: Callable[[Any], None] | None = None,
) -> BenchRun:
    """Launch ``repository`` as `vllm-repo launch` does (its own ports, the OpenAI API too for an OpenAI endpoint),
    measure ``spec`` against it once it is ready, and stop it. ``spec.model`` may be empty when the repository
    serves one model; a model named is the only one launched (Triton's explicit model control). The server is
    always stopped, also on Ctrl-C (the points so far are kept) and on errors."""
    from vllm_repo.serve.launch import run_server
    from vllm_repo.serve.launch_plan import prepare_launch
    from vllm_repo.serve.ports import free_ports

    spec.check()
    if spec.url is not None:
        raise BenchError("give --url or a repository to launch, not both")
    host = "127.0.0.1"
    http_port, grpc_port, metrics_port, openai_port = free_ports(4, host)
    openai = spec.endpoint != "native"
    plan = prepare_launch(
        repository,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        python=python,
        progress=(lambda message: print(message, file=out, flush=True)) if out else None,
        openai_port=openai_port if openai else None,
        load=[spec.model] if spec.model else None,  # that model alone: the repository's others are not loaded
    )
    if on_plan:
        on_plan(plan)
    if not spec.model:
        if len(plan.models) != 1:
            raise BenchError(
                f"{repository} serves {len(plan.models)} models: name the one to measure with --model",
                hint=f"its models: {', '.join(plan.models)}",
            )
        spec.model = plan.models[0]
    elif spec.model not in plan.models:
        raise BenchError(f"{repository} has no model '{spec.model}'", hint=f"its models: {', '.join(plan.models)}")
    spec.url = f"http://{host}:{openai_port}" if openai else f"{host}:{grpc_port}"
    spec.wait_s = max(spec.wait_s, 60.0)  # the gateway may still be connecting to Triton as it turns ready
    run = BenchRun(spec)
    done = threading.Event()

    def measure(server: Any, groups: list[int]) -> None:
        run.server_leaders = groups
        try:
            bench(spec, progress, run)
        finally:
            done.set()  # run_server returns at its next look instead of serving on

    run_server(plan, out=out, ready_timeout=ready_timeout, log_path=log_path, on_ready=measure, stop_event=done)
    if not run.finished:
        run.interrupted = True
    return run
