"""A model whose vLLM engine died: what its requests are told, and whether it is unloaded. Triton's stub is faked
(stub.pb_utils); the backend's own code runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_repo.backend import model as backend
from vllm_repo.backend.vllm_repo_backend import environment, stub


class _TritonError(Exception):
    INTERNAL, UNAVAILABLE = "INTERNAL", "UNAVAILABLE"

    def __init__(self, message: str, code: str = "INTERNAL") -> None:
        super().__init__(message)
        self.message, self.code = message, code


class _Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, int]] = []

    def send(self, response: Any, flags: int) -> None:
        self.sent.append((response, flags))


class _Request:
    def __init__(self) -> None:
        self.sender = _Sender()

    def get_response_sender(self) -> _Sender:
        return self.sender


@pytest.fixture
def triton(monkeypatch):
    """Triton's stub module, recording the models the backend asks it to unload (``fail``: the server refuses, as
    one without explicit model control does)."""
    fake = SimpleNamespace(unloaded=[], fail=False, logged=[])

    def unload_model(name: str) -> None:
        if fake.fail:
            raise RuntimeError("explicit model load / unload is not allowed if polling is enabled")
        fake.unloaded.append(name)

    fake.pb_utils = SimpleNamespace(
        TritonError=_TritonError,
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
        InferenceResponse=lambda output_tensors, error=None: SimpleNamespace(error=error),
        get_input_tensor_by_name=lambda request, name: None,
        unload_model=unload_model,
        Logger=SimpleNamespace(log_error=fake.logged.append, log_warn=fake.logged.append, log_info=fake.logged.append),
    )
    monkeypatch.setattr(stub, "pb_utils", fake.pb_utils)
    return fake


def _dead_model(health_check: bool, monkeypatch) -> backend.TritonPythonModel:
    model = backend.TritonPythonModel.__new__(backend.TritonPythonModel)
    model.model_name, model.health_check = "tiny", health_check
    model._dead_reason, model._closing, model._live, model._metrics = None, False, {}, None
    model._log_start = 0
    monkeypatch.setattr(
        environment, "death_cause_in_server_log", lambda start: "Engine core proc EngineCore_DP0 died (log: /tmp/t.log)"
    )
    model._on_engine_dead()
    return model


def _answer(model: backend.TritonPythonModel) -> _TritonError:
    request = _Request()
    model._admit([request])
    ((response, flags),) = request.sender.sent
    assert flags == 1 and response.error is not None
    return response.error


def test_without_the_health_check_requests_say_the_engine_died_that_the_model_stays_ready_and_what_to_do(
    triton, monkeypatch
):
    error = _answer(_dead_model(False, monkeypatch))
    assert error.code == "UNAVAILABLE"
    assert error.message.startswith("the vLLM engine has died: Engine core proc EngineCore_DP0 died (log: /tmp/t.log)")
    assert "stays loaded and READY in Triton but cannot serve" in error.message
    assert "restart the server" in error.message and "POST /v2/repository/models/tiny/load" in error.message
    assert 'ENABLE_VLLM_HEALTH_CHECK "true"' in error.message  # the way to have it report not ready
    assert triton.unloaded == []
    assert any(
        line.startswith("[vllm] model tiny: the vLLM engine has died: ") for line in triton.logged
    )  # launch reads it


def test_with_the_health_check_the_model_is_unloaded_and_the_requests_before_that_say_why(triton, monkeypatch):
    model = _dead_model(True, monkeypatch)
    assert triton.unloaded == ["tiny"]
    error = _answer(model)
    assert error.code == "UNAVAILABLE" and error.message.startswith("the vLLM engine has died: ")
    assert "unloads the model, so it reports not ready" in error.message
    assert "'unknown model'" in error.message and "POST /v2/repository/models/tiny/load" in error.message


def test_a_health_check_that_cannot_unload_says_the_model_stays_ready_and_why(triton, monkeypatch):
    triton.fail = True
    error = _answer(_dead_model(True, monkeypatch))
    assert "stays loaded and READY in Triton" in error.message
    assert "could not unload it (that needs --model-control-mode=explicit)" in error.message
