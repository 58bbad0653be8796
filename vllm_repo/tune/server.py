"""The server tune measures with: a Triton server with the bundled backend on a copy of the model, in explicit
model-control mode, so that each candidate is a reload through Triton's repository API rather than a new server.

The copy holds the tuned model only: config.pbtxt and each version's model.json are copied (tune rewrites them), every
other file is a symbolic link to the user's, so nothing of the user's repository is written before ``--write``.

A reload is an unload, a wait until Triton reports the model gone, then a load of the rewritten files: loading
over a loaded model makes Triton start the new engine before it stops the old one, and two engines sized for the
same GPU do not fit on it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm_repo.repository import CONFIG_FILE, ENGINE_ARGS_FILE
from vllm_repo.serve.errors import TritonAnswerError, TritonLoadHung, TritonUnreachable
from vllm_repo.serve.launch_plan import LaunchPlan
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.triton_client import TritonHttp
from vllm_repo.tune.errors import TuneError

COPIED = (CONFIG_FILE, ENGINE_ARGS_FILE)
# How long an unload may take before the server is restarted instead (vLLM's engine stops in seconds).
UNLOAD_TIMEOUT_S = 60.0


def work_copy(model_dir: Path, into: Path) -> Path:
    """A repository under ``into`` holding a copy of ``model_dir`` (see the module's docstring); returns its root."""
    root = into / "model_repository"
    target = root / model_dir.name

    def place(source: str, destination: str) -> None:
        if Path(source).name in COPIED:
            shutil.copy2(source, destination)
        else:
            os.symlink(os.path.abspath(source), destination)

    shutil.copytree(model_dir, target, copy_function=place, ignore=shutil.ignore_patterns("tune.json"))
    return root


class ModelServer:
    """One tritonserver in explicit model-control mode serving the copy of the model, named ``model``."""

    def __init__(self, plan: LaunchPlan, model: str, log_path: Path | None = None) -> None:
        self.model = model
        self.plan, self.log_path = plan, log_path
        self.server = self._new_server()
        self.loaded = False
        self.restarts = 0  # servers started anew: an unload that did not finish, a load that hung

    def _new_server(self) -> TritonServer:
        from vllm_repo.serve.launch import server_for

        # Explicit model control: each candidate is loaded, unloaded and loaded again through Triton's API.
        return server_for(self.plan, self.log_path, ["--model-control-mode=explicit"], guard=True)

    def start(self, timeout: float) -> None:
        self.server.start()
        self.server.wait_ready(timeout)

    def stop(self) -> None:
        self.server.stop()

    @property
    def grpc_url(self) -> str:
        return self.server.grpc_url

    def _triton(self) -> TritonHttp:
        return TritonHttp(self.server.http_url)

    def _unreachable(self, exc: TritonUnreachable) -> str:
        """Why the server did not answer: a server that stopped ends the search, anything else is the request's."""
        if not self.server.is_running():
            raise TuneError(
                f"the Triton server stopped (exit status {self.server.started.poll()})",
                hint=f"the end of its log:\n{self.server.log_tail()}",
            ) from None
        return exc.reason

    def state(self) -> str | None:
        """The model's state in Triton's repository index (READY, UNLOADING, UNAVAILABLE...), None when absent."""
        try:
            return self._triton().model_state(self.model, timeout=10)
        except TritonUnreachable as exc:
            self._unreachable(exc)
        except TritonAnswerError:
            pass
        return None

    def reload(self, timeout: float) -> str | None:
        """Unload the model (when loaded) and load it from its files as they are now. Returns None when it is ready,
        else Triton's reason it could not be loaded. A load Triton never finishes (its Python backend's lost stub,
        load_hang.py) ends only with its server: it is tried once more on a new one."""
        if self.loaded:
            self._unload(timeout)
        try:
            return self._load(timeout)
        except TritonLoadHung:
            self._restart(timeout)
        try:
            return self._load(timeout)
        except TritonLoadHung as exc:
            self._restart(timeout)  # the next candidate's load gets a server that answers
            return f"{exc}; again on a new server"

    def _load(self, timeout: float) -> str | None:
        try:
            self.server.load_model(self.model, timeout)  # its Python backend's directory claimed, as at start
        except TritonUnreachable as exc:
            reason = self._unreachable(exc)
        except TritonAnswerError as exc:
            reason = exc.server_message or f"HTTP {exc.status}"
        else:
            self.loaded = True
            return None
        self.loaded = self.state() == "READY"
        return reason.strip()

    def _unload(self, timeout: float) -> None:
        try:
            self._triton().unload_model(self.model, timeout=60)
        except TritonUnreachable as exc:
            self._unreachable(exc)
        except TritonAnswerError:
            pass  # the state below says whether it went
        deadline = time.monotonic() + UNLOAD_TIMEOUT_S
        while self.state() in ("READY", "UNLOADING") and time.monotonic() < deadline:
            time.sleep(0.2)
        self.loaded = False
        if self.state() in ("READY", "UNLOADING"):
            # Something still holds the model (a client's cancelled stream, in Triton 2.51): a new server is the
            # only way to free its engine's memory.
            self._restart(timeout)

    def _restart(self, timeout: float) -> None:
        self.restarts += 1
        self.server.stop()
        self.server = self._new_server()
        self.loaded = False
        self.start(timeout)


def write_candidate_files(work_model: Path, version: str, engine_args: dict[str, Any], config_text: str | None) -> None:
    """The candidate's model.json (and config.pbtxt, where its instances differ) into the work copy."""
    (work_model / version / ENGINE_ARGS_FILE).write_text(json.dumps(engine_args, indent=2) + "\n")
    if config_text is not None:
        (work_model / CONFIG_FILE).write_text(config_text)


def temporary_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="vllm-repo-tune-"))
