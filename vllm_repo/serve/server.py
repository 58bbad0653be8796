"""Run a real Triton Inference Server with the bundled vLLM backend, without Docker.

The server's files (server_files.py: the ``nvidia-pytriton`` wheel's Triton 2.51, or a system Triton) are laid out
into a backend directory for the run; the backend runs in the serving Python (python_env.py), with its bin first on
PATH and its libpython on LD_LIBRARY_PATH (``serving_env``).

The server runs in its own process group: the Python stub, vLLM's EngineCore and multiprocessing's resource tracker are
all descendants, and stopping only ``tritonserver`` leaves them running. ``stop()`` ends the whole group and removes
any shared-memory segment left under this server's unique prefix. What another server on the machine could take too,
its ports and the Python backend's /tmp/python_env_* directory, is claimed for this one (claims.py): it never removes
another's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from vllm_repo.serve.claims import (
    PYTHON_ENV_DIRS,
    claim_python_env,
    hold_ports,
    hold_python_env,
    python_env_dirs,
    python_env_lock,
    release_ports,
    release_python_env,
    remove_python_env,
)
from vllm_repo.serve.errors import TritonLoadHung, TritonServerError, TritonUnreachable
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.load_hang import HANG_HINT, LOAD_HANG_S, LoadHangWatch, hang_message
from vllm_repo.serve.ports import free_ports, port_is_free
from vllm_repo.serve.processes import (
    groups_members,
    groups_started_in,
    shm_segments,
    signal_group,
    unique_shm_prefix,
)
from vllm_repo.serve.python_env import PythonInfo, probe_python
from vllm_repo.serve.server_files import TritonHome, cache_dir, layout_backend_directory
from vllm_repo.serve.triton_client import TritonHttp


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


# Where vLLM makes its ZMQ IPC sockets (default: the temporary directory).
RPC_PATH_ENV = "VLLM_RPC_BASE_PATH"
# torch.compile's cache (default: /tmp/torchinductor_<user>, hundreds of MB a model): with vllm-repo's other caches.
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
__all__ = ["PYTHON_ENV_DIRS", "TritonServer", "serving_env"]


class TritonServer:
    """One tritonserver process (and everything it starts) serving ``model_repository``.

    >>> with TritonServer("model_repository", serving_python=py, triton_home=home) as server:
    ...     server.wait_ready()
    ...     print(server.http_url)

    Ports default to free ones on ``host``; ``host`` defaults to 127.0.0.1 so nothing is exposed by accident.
    ``env`` entries are added to the server's environment (e.g. VLLM_CPU_KVCACHE_SPACE). With ``guard`` (the
    default) a guardian process stops the server's group, and removes its shared memory and work directory, should
    this process die without stopping it (SIGKILL, a killed test runner); launch, which guards the server and its
    OpenAI gateway together, turns it off.
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
        guard: bool = True,
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.python = serving_python if isinstance(serving_python, PythonInfo) else probe_python(serving_python)
        self.triton_home = triton_home if isinstance(triton_home, TritonHome) else TritonHome(Path(triton_home))
        self.host = host
        # Held for this process until stop(): no other vllm-repo process picks them meanwhile (claims.py).
        given = {label: p for label, p in (("HTTP", http_port), ("gRPC", grpc_port), ("metrics", metrics_port)) if p}
        self._held_ports = hold_ports(given)
        picked = free_ports(3 - len(given), host, avoid=given.values(), hold=True)
        self._held_ports += picked
        self.http_port = http_port or picked.pop(0)
        self.grpc_port = grpc_port or picked.pop(0)
        self.metrics_port = metrics_port or picked.pop(0)
        self.shm_prefix = unique_shm_prefix()
        self._own_workdir: Path | None = None
        self._backend_directory = Path(backend_directory) if backend_directory else None
        self._backend_source = backend_source
        self._env_overrides = dict(env or {})
        self._extra_args = list(extra_args)
        self._log_path = Path(log_path) if log_path else None
        self._exit_timeout_s = exit_timeout_s
        self._guard = guard
        self.guardian: Guardian | None = None
        self._log_file: IO[bytes] | None = None
        # Where this server's output starts in its log: a log file given by the user is appended to, run after run.
        self.log_start = 0
        self._final_log: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        # The Python backend's /tmp/python_env_* directory of this server, once it made one (claims.py).
        self.python_env: str | None = None
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
    def work_directory(self) -> Path | None:
        """The temporary directory this server made for itself (its backend directory and its log unless they were
        given, vLLM's IPC sockets), removed by stop(); None before start() and after stop()."""
        return self._own_workdir

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

    def start(self) -> TritonServer:
        if self.process is not None:
            raise TritonServerError("this server was already started")
        if not self.model_repository.is_dir():
            raise TritonServerError(f"model repository {self.model_repository} is not a directory")
        for name, port in (("HTTP", self.http_port), ("gRPC", self.grpc_port), ("metrics", self.metrics_port)):
            if not port_is_free(port, self.host):
                raise TritonServerError(f"{name} port {port} on {self.host} is in use; choose another port")
        # The server runs in it when it holds the server's own files, else in the repository (as it always has).
        cwd = self.model_repository if self._backend_directory and self._log_path else None
        self._own_workdir = Path(tempfile.mkdtemp(prefix="vllm-repo-triton-"))
        laid_out, logged = self._backend_directory is None, self._log_path is None  # in the work directory
        try:
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
            # Open for the server's whole life, closed by stop(): not a with block.
            self._log_file = open(self._log_path, "ab")  # noqa: SIM115
            self.log_start = self._log_file.tell()
            overrides = dict(self._env_overrides)
            if RPC_PATH_ENV not in overrides and RPC_PATH_ENV not in os.environ:
                # vLLM's ZMQ sockets between its processes are files; in the work directory they go with it, even when a
                # killed engine could not remove them.
                (self._own_workdir / "rpc").mkdir()
                overrides[RPC_PATH_ENV] = str(self._own_workdir / "rpc")
            if INDUCTOR_CACHE_ENV not in overrides and INDUCTOR_CACHE_ENV not in os.environ:
                overrides[INDUCTOR_CACHE_ENV] = str(cache_dir() / "torchinductor")
            env = serving_env(self.python, self.triton_home, overrides=overrides)
            with python_env_lock():  # the one python_env directory that appears meanwhile is this server's
                before = python_env_dirs()
                self.process = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=self._log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(cwd or self._own_workdir),
                    start_new_session=True,
                    preexec_fn=_reset_signals if _signals_need_reset() else None,
                )
                if self._guard:
                    self.guardian = Guardian(self.process.pid, self.shm_prefix, remove=[self._own_workdir])
                self._take_python_env(claim_python_env(before, self._settled))
        except BaseException:
            if self.process is not None:  # interrupted while it started: stopped, as a started server would be
                self.stop()
                raise
            # Nothing of a start that failed before the server ran stays behind: its work directory, its log file.
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            shutil.rmtree(self._own_workdir, ignore_errors=True)
            self._own_workdir = None
            self._backend_directory = None if laid_out else self._backend_directory
            self._log_path = None if logged else self._log_path
            raise
        return self

    def load_model(self, model: str, timeout: float, poll_s: float = 0.5, load_hang_s: float = LOAD_HANG_S) -> None:
        """Load ``model`` through Triton's model-control API (``--model-control-mode=explicit``). A server started
        with no model loaded makes the Python backend's /tmp/python_env_* directory at its first load (and again
        should the backend have gone with the last model unloaded): that load starts under the machine's python_env
        lock, and the directory it makes is claimed for this server, as at start. Raises what the client raises, and
        TritonLoadHung as soon as the load is seen hung (load_hang.py): Triton's answer to it would never come."""
        client = TritonHttp(self.http_url)
        hangs = self.load_hang_watch(load_hang_s)
        # Not a `with`: a hung load's request is left to end with its server, which only a stop does.
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="triton-load")
        try:
            if self.python_env is not None and os.path.isdir(self.python_env):
                loading = pool.submit(client.load_model, model, timeout)  # the backend's directory is claimed already
            else:
                with python_env_lock():
                    before = python_env_dirs()
                    loading = pool.submit(client.load_model, model, timeout)
                    self._take_python_env(claim_python_env(before, loading.done))
            while True:
                with contextlib.suppress(concurrent.futures.TimeoutError):
                    return loading.result(timeout=poll_s)
                self._raise_if_hung(hangs)
        finally:
            pool.shutdown(wait=False)

    def _take_python_env(self, made: str | None) -> None:
        """The Python backend's directory claimed for this server (None: none appeared, or not only one): held while
        the server lives, and removed by its guardian should this process die (claims.py)."""
        if made is None:
            return
        release_python_env(self.python_env)  # one the backend made before and removed with its last model
        self.python_env = made
        hold_python_env(made)
        if self.guardian is not None:
            self.guardian.remove_too(Path(made))

    def _settled(self) -> bool:
        """Whether the server got as far as it will without a python_env directory: it exited, or is ready."""
        return self.process is None or self.process.poll() is not None or self.is_ready()

    @property
    def started(self) -> subprocess.Popen[bytes]:
        """The tritonserver process, once start() has run (before it, asking is a bug)."""
        if self.process is None:
            raise RuntimeError("the Triton server has not been started")
        return self.process

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def is_ready(self) -> bool:
        return self._answers(lambda triton: triton.server_ready())

    def model_ready(self, name: str) -> bool:
        """Whether Triton says model ``name`` is ready (its backend unloads a model whose engine died)."""
        return self._answers(lambda triton: triton.model_ready(name))

    def _answers(self, ready: Callable[[TritonHttp], bool]) -> bool:
        try:
            return ready(TritonHttp(self.http_url, timeout=2))
        except TritonUnreachable:
            return False

    def load_hang_watch(self, after_s: float = LOAD_HANG_S) -> LoadHangWatch | None:
        """A watch of this run's log for a load Triton never finishes (load_hang.py); None without a log."""
        return LoadHangWatch(self._log_path, self.log_start, after_s) if self._log_path is not None else None

    def wait_ready(self, timeout: float = 300.0, poll_s: float = 0.5, load_hang_s: float = LOAD_HANG_S) -> TritonServer:
        """Block until /v2/health/ready answers 200. Raises TritonServerError (with the end of the server log) when
        the server exits first or ``timeout`` passes, TritonLoadHung as soon as a load is seen hung (load_hang.py)."""
        if self.process is None:
            raise TritonServerError("start() the server before waiting for it")
        deadline = time.monotonic() + timeout
        hangs = self.load_hang_watch(load_hang_s)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TritonServerError(
                    f"tritonserver exited with status {self.process.returncode} before it was ready; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            if self.is_ready():
                return self
            self._raise_if_hung(hangs)
            time.sleep(poll_s)
        raise TritonServerError(
            f"tritonserver was not ready after {timeout:.0f} s; log {self._log_path}:\n{self.log_tail()}"
        )

    def _raise_if_hung(self, hangs: LoadHangWatch | None) -> None:
        hung = hangs.hung() if hangs is not None else None
        if hung is not None:
            raise TritonLoadHung(f"{hang_message(hung)} (log {self._log_path}, line {hung.ready_line})", HANG_HINT)

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stop the server and everything it started; returns the server's exit status (None if never started).
        Safe to call twice.

        tritonserver alone gets SIGTERM first: it unloads its models, so the backend's finalize() shuts vLLM down
        in order. Whatever outlives it in the process group, or in a group started in it (a stuck stub, an orphaned
        EngineCore, ENGINE_PROCESS's engine process), gets SIGTERM, then SIGKILL. Shared-memory segments left under
        this server's prefix are removed.
        """
        if self.process is None:
            self._cleanup_workdir()
            return None
        process = self.process
        # The leader of its own group and session (start_new_session), as self.pgid says, and the groups started in
        # it (ENGINE_PROCESS's engine process leads one, with the EngineCore it started), read before the SIGTERM.
        groups = sorted(groups_started_in(process.pid))
        deadline = time.monotonic() + timeout
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        # Children normally follow the server out within moments.
        self._wait_groups_empty(process, groups, min(deadline, time.monotonic() + 5))
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            left = sorted(groups_members(groups))
            if not left:
                break
            self.escalated_to = signal.Signals(sig).name
            for group in left:
                signal_group(group, sig)
            self._wait_groups_empty(process, left, time.monotonic() + grace)
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
        if self.guardian is not None:
            self.guardian.release()
            self.guardian = None
        return status

    @staticmethod
    def _wait_groups_empty(process: subprocess.Popen[bytes], groups: list[int], deadline: float) -> None:
        while time.monotonic() < deadline:
            process.poll()  # reap the leader so it does not linger as a zombie
            if not groups_members(groups):
                return
            time.sleep(0.1)

    def _cleanup_workdir(self) -> None:
        # The Python backend's own directory, should the server have died before its shutdown removed it; never
        # another server's (claims.py). Then the ports: the server that held them is gone.
        remove_python_env(self.python_env)
        release_python_env(self.python_env)
        self.python_env = None
        release_ports(self._held_ports)
        self._held_ports = []
        # A log inside our own work directory is kept in memory, so log_text() still answers after stop().
        if self._own_workdir is not None:
            if self._log_path is not None and self._own_workdir in self._log_path.parents:
                self._final_log = self.log_text()
            shutil.rmtree(self._own_workdir, ignore_errors=True)
            self._own_workdir = None

    def log_text(self) -> str:
        """What this server wrote to its log (not what earlier runs left in the same file)."""
        if self._final_log is not None:
            return self._final_log
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, "rb") as log:
                log.seek(self.log_start)
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> TritonServer:
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


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
