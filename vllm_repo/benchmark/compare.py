"""`bench REPO --compare`: the same load through the repository's Triton server and through `vllm serve` (or Triton
with another backend directory), on the same machine, one server at a time unless asked to keep them together.

- The servers: ``triton`` (the repository as `bench REPO` launches it), each ``--compare`` contender: ``vllm-serve``
  (model.json as vllm serve's command line, vllm_serve.py) or ``backend=DIR`` (the repository with that backend).
- The sides: what is measured, a server and an endpoint: Triton over its native gRPC streaming and over the OpenAI
  gateway, vllm serve over its OpenAI API. Every side gets the same prompts (made once, with the first server's
  tokenizer), the same output lengths, and the same warm-up.
- Rounds: round r visits the servers in order, the next round in reverse order (A B, B A, A B, ...), so that drift
  hits every side alike; one at a time, a server that ends a round and starts the next stays loaded between them.
- The comparison (compare_report.py): per load point, each side's figures over all rounds, the ratio of each to the
  reference side (vllm serve; without it, the first contender) as the median of the per-round ratios with their range,
  and whether every side was given the same work (input and output tokens per request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from vllm_repo.benchmark.clients import make_client
from vllm_repo.benchmark.compare_setup import describe_plan, describe_setup
from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.prompts import Prompt, PromptSet, take
from vllm_repo.benchmark.run import BenchSpec, Progress, _prompts, _warm_up, guard, label, measure_point
from vllm_repo.benchmark.server_cpu import ServerCpu
from vllm_repo.benchmark.stats import RequestRecord
from vllm_repo.benchmark.vllm_serve import ServeArgs, VllmServe, require_vllm, serve_args_for
from vllm_repo.errors import UsageError

VLLM_SERVE = "vllm-serve"
TRITON = "triton"
HOST = "127.0.0.1"
# The Triton endpoints measured unless --endpoint names one.
DEFAULT_TRITON_ENDPOINTS = ("native", "openai")
# How much of each GPU the engines kept loaded together may claim (gpu_memory_utilization summed).
TOGETHER_GPU_SHARE = 0.95


@dataclasses.dataclass(frozen=True)
class Contender:
    """A server set against the repository's Triton: vllm serve, or Triton with another backend directory."""

    kind: str  # VLLM_SERVE or "backend"
    backend_dir: Path | None = None

    @property
    def name(self) -> str:
        return VLLM_SERVE if self.kind == VLLM_SERVE else f"backend={self.backend_dir}"


def parse_contenders(values: Iterable[str]) -> list[Contender]:
    """--compare vllm-serve,backend=DIR (comma-separated, or the option given again)."""
    found: list[Contender] = []
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            if part == VLLM_SERVE:
                contender = Contender(VLLM_SERVE)
            elif part.startswith("backend=") and part.removeprefix("backend="):
                contender = Contender("backend", Path(part.removeprefix("backend=")).expanduser())
            else:
                raise UsageError(
                    f"--compare: '{part}' is neither vllm-serve nor backend=DIR",
                    hint="e.g. --compare vllm-serve or --compare vllm-serve,backend=/opt/tritonserver/backends/vllm",
                )
            if contender in found:
                raise UsageError(f"--compare: {contender.name} is given twice")
            found.append(contender)
    if not found:
        raise UsageError("--compare is empty", hint="e.g. --compare vllm-serve")
    return found


@dataclasses.dataclass
class Measured:
    """One side's requests at one load point in one round."""

    records: list[RequestRecord]
    wall_s: float
    client_cpu_s_per_s: float = 0.0  # this process's CPU seconds a second: near 1, the client is the limit
    # The side's server's CPU seconds a second by process role (server_cpu.py): where the server's time went.
    server_cpu: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Side:
    """What is measured: one endpoint of one server. ``rounds[r][i]``: round r's measurement of load point i."""

    name: str
    server: str
    endpoint: str
    url: str = ""
    rounds: list[list[Measured]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Server:
    name: str  # TRITON, VLLM_SERVE or backend=DIR
    sides: list[Side]
    backend_dir: Path | None = None  # backend=DIR: the --backend-directory Triton is given (laid out)
    leaders: list[int] = dataclasses.field(default_factory=list)  # its process groups' ids, once it runs


@dataclasses.dataclass
class CompareSpec:
    contenders: list[Contender]
    rounds: int = 1
    together: bool = False  # keep every server loaded at once (refused where their engines do not fit)
    endpoints: list[str] | None = None  # Triton's endpoints; None: DEFAULT_TRITON_ENDPOINTS

    def check(self) -> None:
        if self.rounds < 1:
            raise BenchError(f"--rounds must be at least 1, not {self.rounds}")

    def reference(self) -> str:
        """The server the ratios are to: vllm serve where it is compared, else the first contender."""
        names = [c.name for c in self.contenders]
        return VLLM_SERVE if VLLM_SERVE in names else names[0]


@dataclasses.dataclass
class CompareRun:
    spec: BenchSpec
    compare: CompareSpec
    servers: list[Server]
    placement: str = ""
    order: list[list[str]] = dataclasses.field(default_factory=list)  # the servers of each round, in order
    setup: dict[str, Any] = dataclasses.field(default_factory=dict)
    prompts: PromptSet | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    finished: bool = False
    interrupted: bool = False

    @property
    def sides(self) -> list[Side]:
        return [side for server in self.servers for side in server.sides]

    def reference_side(self) -> Side:
        reference = self.compare.reference()
        return next(s for s in self.sides if s.server == reference)

    def report(self) -> dict[str, Any]:
        from vllm_repo.benchmark.compare_report import report

        return report(self)


# ---------------------------------------------------------------------------------------------------------------------
# The plan: servers, sides, rounds
# ---------------------------------------------------------------------------------------------------------------------


def plan_servers(compare: CompareSpec) -> list[Server]:
    """The repository's Triton first, then each contender, with the sides measured on each."""
    endpoints = list(compare.endpoints or DEFAULT_TRITON_ENDPOINTS)
    openai_route = "openai-chat" if "openai-chat" in endpoints else "openai"
    servers = [Server(TRITON, [Side(f"{TRITON} {e}", TRITON, e) for e in endpoints])]
    for contender in compare.contenders:
        name = contender.name
        if contender.kind == VLLM_SERVE:
            servers.append(Server(name, [Side(VLLM_SERVE, name, openai_route)]))
        else:
            # The OpenAI gateway needs the bundled backend's OpenAI input; another backend is measured natively.
            assert contender.backend_dir is not None
            theirs = endpoints if _is_vllm_repo_backend(contender.backend_dir) else ["native"]
            servers.append(Server(name, [Side(f"{name} {e}", name, e) for e in theirs]))
    return servers


def round_order(names: list[str], rounds: int) -> list[list[str]]:
    """Round r visits the servers in order when r is even, in reverse when it is odd."""
    return [names if r % 2 == 0 else names[::-1] for r in range(rounds)]


def launches(order: list[list[str]], together: bool) -> list[list[tuple[int, str]]]:
    """The visits (round, server) each launch serves: all of them in one when the servers stay loaded together;
    else one launch per run of visits to the same server (the last of a round is the first of the next)."""
    visits = [(r, name) for r, names in enumerate(order) for name in names]
    if together:
        return [visits]
    grouped: list[list[tuple[int, str]]] = []
    for visit in visits:
        if grouped and grouped[-1][-1][1] == visit[1]:
            grouped[-1].append(visit)
        else:
            grouped.append([visit])
    return grouped


# ---------------------------------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Context:
    repository: Path
    run: CompareRun
    progress: Progress | None
    out: TextIO | None
    python: Path | None
    ready_timeout: float
    serve_args: ServeArgs | None
    serve_env: dict[str, str]
    info: Any  # the serving Python's PythonInfo

    def say(self, message: str) -> None:
        if self.out is not None:
            print(message, file=self.out, flush=True)


def compare_repository(
    repository: Path,
    spec: BenchSpec,
    compare: CompareSpec,
    *,
    progress: Progress | None = None,
    out: TextIO | None = None,
    python: Path | None = None,
    ready_timeout: float = 900.0,
) -> CompareRun:
    """Measure ``spec`` on the repository's Triton and on each contender of ``compare``, round after round; Ctrl-C
    (or SIGTERM) stops every server and keeps what was measured (``interrupted``)."""
    from vllm_repo.serve.python_env import probe_python, serving_python_path

    spec.check()
    compare.check()
    if spec.url is not None:
        raise BenchError("--compare launches the servers itself: give a repository, not --url")
    info = probe_python(serving_python_path(python))
    serve_args = None
    if any(c.kind == VLLM_SERVE for c in compare.contenders):
        require_vllm(info)
        serve_args = serve_args_for(repository, spec.model or None, info.vllm_version)
        spec.model = serve_args.model_name
    else:
        spec.model = _only_model(repository, spec.model)
    for contender in compare.contenders:
        if contender.backend_dir is not None:
            backend_layout(contender.backend_dir)  # refused before anything starts
    servers = plan_servers(compare)
    run = CompareRun(spec, compare, servers, order=round_order([s.name for s in servers], compare.rounds))
    for side in run.sides:
        side.rounds = [[] for _ in range(compare.rounds)]
    together, run.placement = placement(repository, spec.model, compare.together, len(servers))
    ctx = _Context(repository, run, progress, out, python, ready_timeout, serve_args, {}, info)
    run.setup = describe_setup(repository, spec.model, info, serve_args, servers)
    with _backend_directories(servers, info), _sigterm_as_interrupt():
        try:
            for visits in launches(run.order, together):
                names = list(dict.fromkeys(name for _, name in visits))
                _nest([_server(run, n) for n in names], functools.partial(_measure_visits, ctx, visits), ctx)
            run.finished = True
        except KeyboardInterrupt:
            run.interrupted = True
    return run


def _only_model(repository: Path, model: str) -> str:
    from vllm_repo.repository import open_repository

    names = [m.name for m in open_repository(repository).models]
    if model:
        if model not in names:
            raise BenchError(f"{repository} has no model '{model}'", hint=f"its models: {', '.join(names)}")
        return model
    if len(names) != 1:
        raise BenchError(
            f"{repository} serves {len(names)} models: name the one to measure with --model",
            hint=f"its models: {', '.join(names)}",
        )
    return names[0]


def _server(run: CompareRun, name: str) -> Server:
    return next(s for s in run.servers if s.name == name)


def placement(repository: Path, model: str, together: bool, count: int) -> tuple[bool, str]:
    """Whether the servers stay loaded together, and the sentence that says so in the report."""
    from vllm_repo.repository import open_repository
    from vllm_repo.serve.launch_plan import has_nvidia_gpu

    if not together:
        return False, "one at a time: each server is stopped before the next one starts"
    if not has_nvidia_gpu():
        return True, f"together: {count} servers loaded at once (no NVIDIA GPU; each engine's KV cache is bounded)"
    settings = next(m for m in open_repository(repository).models if m.name == model).engine_settings()
    fraction = settings.gpu_memory_utilization_or(0.9)
    total = fraction * count
    if total > TOGETHER_GPU_SHARE:
        raise BenchError(
            f"--together: {count} engines of gpu_memory_utilization {fraction:g} would claim {total:.2f} of each GPU; "
            "they do not fit side by side",
            hint=f"leave --together out (one server at a time), or lower gpu_memory_utilization to "
            f"{TOGETHER_GPU_SHARE / count:.2f} or less in model.json",
        )
    return True, (
        f"together: {count} engines of gpu_memory_utilization {fraction:g} claim {total:.2f} of each GPU, "
        "loaded at once"
    )


def _nest(servers: list[Server], work: Callable[[], None], ctx: _Context) -> None:
    """``work`` with every server of ``servers`` started and ready, each stopped afterwards (also on errors)."""
    if not servers:
        work()
        return
    head, rest = servers[0], servers[1:]
    session = _vllm_serve_session if head.name == VLLM_SERVE else _triton_session
    session(head, ctx, lambda: _nest(rest, work, ctx))


def _triton_session(server: Server, ctx: _Context, work: Callable[[], None]) -> None:
    """The repository launched as bench REPO launches it (with ``server``'s backend directory), ``work`` once it is
    ready, then stopped. A Ctrl-C that run_server took for itself is raised again once the server is stopped."""
    from vllm_repo.serve.launch import run_server
    from vllm_repo.serve.launch_plan import prepare_launch
    from vllm_repo.serve.ports import free_ports

    http_port, grpc_port, metrics_port, openai_port = free_ports(4, HOST)
    openai = any(side.endpoint != "native" for side in server.sides)
    ctx.say(f"launching {server.name} ...")
    plan = prepare_launch(
        ctx.repository,
        host=HOST,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        python=ctx.python,
        progress=ctx.say if ctx.out is not None else None,
        openai_port=openai_port if openai else None,
        load=[ctx.run.spec.model],  # the model compared, alone (the repository's others are not loaded)
    )
    if server.backend_dir is not None:
        plan.backend_directory = server.backend_dir
    if server.name == TRITON:
        ctx.run.setup.update(describe_plan(plan))
    for side in server.sides:
        side.url = f"{HOST}:{grpc_port}" if side.endpoint == "native" else f"http://{HOST}:{openai_port}"
    done, finished = threading.Event(), threading.Event()

    def on_ready(_: Any, groups: list[int]) -> None:
        server.leaders = groups
        try:
            work()
            finished.set()
        finally:
            done.set()

    run_server(plan, out=ctx.out, ready_timeout=ctx.ready_timeout, on_ready=on_ready, stop_event=done)
    if not finished.is_set():
        raise KeyboardInterrupt  # stopped by Ctrl-C or SIGTERM before the work was done


def _vllm_serve_session(server: Server, ctx: _Context, work: Callable[[], None]) -> None:
    from vllm_repo.serve.launch_plan import cpu_settings, has_nvidia_gpu
    from vllm_repo.serve.ports import free_port

    assert ctx.serve_args is not None  # made when vllm-serve is a contender
    env: dict[str, str] = {}
    if not has_nvidia_gpu():
        env, _ = cpu_settings(ctx.repository, dict(os.environ))  # what launch gives Triton's engine
    server_process = VllmServe(ctx.info, ctx.serve_args, free_port(HOST), host=HOST, env=env)
    server.sides[0].url = server_process.url
    ctx.run.setup["vllm_serve_command"] = ["vllm serve", *server_process.serve.args()[1:]]
    ctx.run.setup["vllm_serve_environment"] = env
    ctx.say(f"starting vllm serve at {server_process.url} ...")
    with server_process.running(ctx.ready_timeout) as took:
        ctx.say(f"vllm serve is ready ({took:.0f} s)")
        assert server_process.process is not None  # started: the leader of its own group
        server.leaders = [server_process.process.pid]
        try:
            work()
        finally:
            ctx.say("stopping vllm serve ...")


def _measure_visits(ctx: _Context, visits: list[tuple[int, str]]) -> None:
    for round_index, name in visits:
        for side in _server(ctx.run, name).sides:
            asyncio.run(_measure_side(ctx, side, round_index))


def prompts_needed(spec: BenchSpec, rounds: int) -> int:
    return spec.warmup + rounds * spec.prompts_per_pass()


def prompts_of(spec: BenchSpec, prompts: list[Prompt], round_index: int, point: int) -> list[Prompt]:
    """Round ``round_index``'s prompts at load point ``point``: every side gets these same ones; no prompt is sent in
    two rounds or two points (a prefix cache would answer it from memory)."""
    start = spec.warmup + round_index * spec.prompts_per_pass() + spec.point_offset(point)
    return take(prompts, start, spec.prompts_at(point))


async def _measure_side(ctx: _Context, side: Side, round_index: int) -> None:
    run, spec, progress = ctx.run, ctx.run.spec, ctx.progress
    server_cpu = ServerCpu(_server(run, side.server).leaders)
    client = make_client(side.endpoint, side.url, spec.model, spec.api_key)
    await client.open()
    try:
        await client.wait_ready(60.0)  # the gateway may still be connecting to Triton as it turns ready
        if run.prompts is None:
            run.prompts = await _prompts(spec, client, prompts_needed(spec, ctx.run.compare.rounds))
            if run.prompts.note:
                run.notes.append(run.prompts.note)
                if progress:
                    progress.note(run.prompts.note)
        prompts = run.prompts.prompts
        await guard(_warm_up(client, prompts[: spec.warmup], progress), client, spec.stall_s)
        for i, load in enumerate(spec.loads()):
            chosen = prompts_of(spec, prompts, round_index, i)
            if progress:
                progress.start_point(f"round {round_index + 1}, {side.name}, {label(load)}", len(chosen))
            on_done = progress.request_done if progress else None
            server_cpu.start()
            records, wall, client_cpu = await measure_point(client, chosen, load, spec, spec.seed + i, on_done)
            side.rounds[round_index].append(Measured(records, wall, client_cpu, server_cpu.stop()))
            if progress:
                from vllm_repo.benchmark.stats import summarize

                progress.end_point(summarize(records, wall, load, spec.slo))
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------------------------------------
# backend=DIR, and signals
# ---------------------------------------------------------------------------------------------------------------------


def _is_vllm_repo_backend(directory: Path) -> bool:
    backend = directory / "vllm" if (directory / "vllm" / "model.py").is_file() else directory
    return (backend / "vllm_repo_backend").is_dir()


def backend_layout(directory: Path) -> Path | None:
    """The --backend-directory to give Triton for backend=DIR as it is: DIR itself when it holds the Python backend
    and vllm/ (a container's backends/), None when DIR is one backend (its model.py and files) that must be laid out
    beside the Python backend. Refuses a DIR with no model.py."""
    if (directory / "vllm" / "model.py").is_file() and (directory / "python").is_dir():
        return directory
    if (directory / "model.py").is_file() or (directory / "vllm" / "model.py").is_file():
        return None
    raise BenchError(
        f"--compare backend={directory}: no Triton vLLM backend there (no model.py)",
        hint="give the backend's directory, e.g. /opt/tritonserver/backends/vllm, or a backends directory holding "
        "python/ and vllm/",
    )


@contextmanager
def _backend_directories(servers: list[Server], info: Any) -> Iterator[None]:
    """Each backend=DIR server's --backend-directory: DIR, or a temporary one with Triton's Python backend and a copy
    of DIR as vllm/ (removed afterwards)."""
    from vllm_repo.serve.server_files import find_server, layout_backend_directory

    made: list[Path] = []
    try:
        for server in servers:
            if not server.name.startswith("backend="):
                continue
            directory = Path(server.name.removeprefix("backend="))
            server.backend_dir = backend_layout(directory)
            if server.backend_dir is None:
                source = directory / "vllm" if (directory / "vllm" / "model.py").is_file() else directory
                root = Path(tempfile.mkdtemp(prefix="vllm-repo-compare-backend-"))
                made.append(root)
                layout_backend_directory(root, find_server(None).home, info.version)
                shutil.rmtree(root / "vllm")
                shutil.copytree(source, root / "vllm", symlinks=True)
                server.backend_dir = root
        yield
    finally:
        for root in made:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops the comparison as Ctrl-C does (run_server sets its own while a Triton server runs)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
