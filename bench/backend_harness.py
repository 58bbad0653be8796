"""Run the bundled backend's own code (vllm_repo/backend/model.py) in-process, without a Triton server.

A stand-in ``triton_python_backend_utils`` module gives model.py the few Triton calls it makes (tensors, responses,
response senders, errors, logging), so ``TritonPythonModel.initialize/execute/finalize`` run as they would inside the
Python stub: parsing, AsyncLLM on the backend's event loop, streaming deltas, cancellation via ``is_cancelled()``.
What it leaves out is Triton itself (the IPC from the stub to the server and the server's frontends).

Used where a Triton server cannot run (the GPU device: no server files, numpy 2) and to separate the backend's own
cost from Triton's in benchmarks.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

BACKEND_FILE = Path(__file__).resolve().parents[1] / "vllm_repo" / "backend" / "model.py"
FINAL = 1


class Tensor:
    def __init__(self, name: str, value: np.ndarray):
        self._name, self._value = name, value

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._value


class TritonError:
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = 1):
        self._message, self.code = message, code

    def message(self) -> str:
        return self._message


class InferenceResponse:
    def __init__(self, output_tensors=(), error: TritonError | None = None):
        self.tensors = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


class Logger:
    quiet = True

    @classmethod
    def _log(cls, level: str, message: str) -> None:
        if not cls.quiet or level != "info":
            print(f"[backend {level}] {message}", file=sys.stderr, flush=True)

    log_info = classmethod(lambda cls, m: cls._log("info", m))
    log_warn = classmethod(lambda cls, m: cls._log("warn", m))
    log_error = classmethod(lambda cls, m: cls._log("error", m))


class ResponseSender:
    """Collects responses with their arrival times; ``cancel()`` makes is_cancelled() true, as a client cancel does."""

    def __init__(self, on_final=None) -> None:
        self.responses: list[tuple[float, InferenceResponse, int]] = []
        self.done = threading.Event()
        self.cancelled = False
        self.created = time.perf_counter()
        self.on_final = on_final

    def send(self, response: InferenceResponse, flags: int = 0) -> None:
        if self.done.is_set():
            raise RuntimeError("a response was sent after the final one")
        self.responses.append((time.perf_counter(), response, flags))
        if flags & FINAL:
            self.done.set()
            if self.on_final is not None:
                self.on_final(self)

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self) -> None:
        self.cancelled = True

    # -- views for callers --
    def texts(self) -> list[str]:
        return [
            r.tensors["text_output"][0].decode("utf-8", "replace")
            for _, r, _ in self.responses
            if "text_output" in r.tensors
        ]

    def error(self) -> str | None:
        errors = [r.error.message() for _, r, _ in self.responses if r.error is not None]
        return errors[0] if errors else None

    def num_output_tokens(self) -> int:
        return int(
            sum(
                int(r.tensors["num_output_tokens"].sum())
                for _, r, _ in self.responses
                if "num_output_tokens" in r.tensors
            )
        )

    def ttft(self) -> float | None:
        return self.responses[0][0] - self.created if self.responses else None


class Request:
    def __init__(
        self,
        prompt: str,
        sampling: dict | None = None,
        parameters: dict | None = None,
        on_final=None,
        requested_outputs: tuple[str, ...] = (),
        **flags: Any,
    ):
        self.inputs = {"text_input": np.array([prompt.encode()], dtype=np.object_)}
        if sampling is not None:
            self.inputs["sampling_parameters"] = np.array([json.dumps(sampling).encode()], dtype=np.object_)
        for name, value in flags.items():
            self.inputs[name] = np.array([value], dtype=bool)
        self._parameters = json.dumps(parameters or {})
        self._requested_outputs = list(requested_outputs)  # none: the client asked for every output
        self.sender = ResponseSender(on_final)

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def parameters(self) -> str:
        return self._parameters

    def requested_output_names(self) -> list[str]:
        return self._requested_outputs


def _get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    value = request.inputs.get(name)
    return None if value is None else Tensor(name, value)


def install_fake_triton_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = Tensor
    module.TritonError = TritonError
    module.InferenceResponse = InferenceResponse
    module.Logger = Logger
    module.get_input_tensor_by_name = _get_input_tensor_by_name
    module.using_decoupled_model_transaction_policy = lambda config: True
    module.TRITONSERVER_RESPONSE_COMPLETE_FINAL = FINAL

    def unload_model(name: str) -> None:
        raise RuntimeError("no Triton server here")

    module.unload_model = unload_model
    sys.modules["triton_python_backend_utils"] = module
    return module


def load_backend(path: Path = BACKEND_FILE) -> types.ModuleType:
    """model.py as a module, with the stand-in Triton utilities."""
    install_fake_triton_utils()
    spec = importlib.util.spec_from_file_location("vllm_backend_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def start_model(
    model_dir: Path, engine_args: dict, parameters: dict[str, str] | None = None, name: str = "m", kind: str = "CPU"
):
    """A TritonPythonModel initialized as Triton would: ``model_dir/1/model.json`` is written from engine_args."""
    backend = load_backend()
    version_dir = model_dir / "1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.json").write_text(json.dumps(engine_args))
    config = {"name": name, "parameters": {k: {"string_value": v} for k, v in (parameters or {}).items()}}
    model = backend.TritonPythonModel()
    model.initialize(
        {
            "model_name": name,
            "model_version": "1",
            "model_repository": str(model_dir),
            "model_config": json.dumps(config),
            "model_instance_kind": kind,
            "model_instance_device_id": "0",
            "model_instance_name": f"{name}_0",
        }
    )
    return model
