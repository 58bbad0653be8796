"""The backend's errors: a request that cannot be served as sent, and a model configuration that cannot be loaded,
each saying where and why, often with a did-you-mean."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


class RequestError(ValueError):
    """A request that cannot be served as sent. ``field`` names the input or sampling key at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class BackendConfigError(RuntimeError):
    """The model's configuration (config.pbtxt, model.json, multi_lora.json, openai.json) cannot be loaded; says where
    and why."""


def after_engine_death(model_name: str, health_check: bool, unloaded: bool) -> str:
    """What happens to a model whose engine died, and what brings it back: the second half of the error its requests
    get. Triton's Python backend cannot mark a loaded model not ready: only an unload (ENABLE_VLLM_HEALTH_CHECK) does
    that."""
    load = f"POST /v2/repository/models/{model_name}/load"
    if unloaded:
        return (
            "ENABLE_VLLM_HEALTH_CHECK unloads the model, so it reports not ready and Triton answers its next "
            f"requests 'unknown model': load it again ({load}) or restart the server"
        )
    why = (
        "ENABLE_VLLM_HEALTH_CHECK could not unload it (that needs --model-control-mode=explicit)"
        if health_check
        else 'set ENABLE_VLLM_HEALTH_CHECK "true" to have such a model unloaded, so that it reports not ready'
    )
    return (
        "the model stays loaded and READY in Triton but cannot serve: restart the server, or load it again "
        f"({load}, with --model-control-mode=explicit); {why}"
    )


_SWITCH = re.compile(r"^(enable|disable|no|use|skip)_")


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    if not close:
        return ""
    # Never the same switch turned the other way (disable_log_requests -> enable_log_requests): followed as written,
    # it would mean the opposite.
    if _SWITCH.sub("", close[0]) == _SWITCH.sub("", name) and close[0] != name:
        return ""
    return f' (did you mean "{close[0]}"?)'
