"""model.json's engine settings as one typed object: what validate, estimate, plan, init, launch, the Ray checks and
export read from a model's EngineArgs, built once from the file.

model.json is free-form JSON (every EngineArgs key of every release, and the backend's own), so the file itself stays
a dict; ``EngineSettings`` holds the keys vllm-repo reasons about, each with its type, and leaves the rest alone.
Two ways to read a file:

- ``strict``: a value of the wrong form is a ``UsageError`` naming the key (estimate and plan, which compute with
  the values and must not compute with a guess);
- lenient (the default): such a value reads as if the key were absent, because it is VR303's finding and the other
  checks must not stop at it.

Either way a string that spells the right type ("2", "0.9", "true") reads as that value: model.json files written for
Triton's own vLLM backend often quote everything, and that backend converts them.

What the file leaves out is None where vLLM's default depends on the release or the model (``max_model_len``,
``gpu_memory_utilization``...); ``gpu_memory_utilization_or(release_default)`` and friends resolve those with the
release's facts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from vllm_repo.errors import UsageError


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """The EngineArgs vllm-repo reads, typed. None: not in model.json (vLLM's default applies)."""

    model: str | None = None
    tokenizer: str | None = None
    revision: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    nnodes: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool | None = None
    enable_chunked_prefill: bool | None = None
    enable_expert_parallel: bool | None = None
    trust_remote_code: bool | None = None
    distributed_executor_backend: str | None = None

    @property
    def tp(self) -> int:
        """tensor_parallel_size, 1 (vLLM's default) where unset or not a positive integer."""
        return _positive(self.tensor_parallel_size)

    @property
    def pp(self) -> int:
        """pipeline_parallel_size, 1 where unset or not a positive integer."""
        return _positive(self.pipeline_parallel_size)

    @property
    def parallel_size(self) -> int:
        """The GPUs one engine uses: tensor_parallel_size x pipeline_parallel_size."""
        return self.tp * self.pp

    @property
    def hosts(self) -> int:
        """nnodes: the hosts one engine spans, 1 where unset or not a positive integer."""
        return _positive(self.nnodes)

    @property
    def uses_ray(self) -> bool:
        return self.distributed_executor_backend == "ray"

    def gpu_memory_utilization_or(self, release_default: float) -> float:
        """The share of each GPU the engine claims: the file's value, else the release's default."""
        value = self.gpu_memory_utilization
        return release_default if value is None else value

    def replace(self, **changes: Any) -> EngineSettings:
        """These settings with some changed (a recommendation tried, a command-line flag)."""
        return dataclasses.replace(self, **changes)

    def overridden_by(self, **flags: Any) -> EngineSettings:
        """These settings with every flag that is not None in its place: command-line flags win over model.json."""
        return self.replace(**{key: value for key, value in flags.items() if value is not None})

    def given(self) -> dict[str, Any]:
        """The settings the file (or a flag) gave, by EngineArgs name."""
        return {f.name: getattr(self, f.name) for f in FIELDS if getattr(self, f.name) is not None}


FIELDS = dataclasses.fields(EngineSettings)
# Numbers beyond it read as it: the checks report "far too much" instead of failing on infinity.
HUGE = 1e300
# Each field's type, read from the annotation: "int | None" -> int.
_KINDS: dict[str, type] = {
    f.name: {"str": str, "int": int, "float": float, "bool": bool}[str(f.type).split(" |")[0]] for f in FIELDS
}


def read_engine_settings(engine_args: Mapping[str, Any], *, strict: bool = False) -> EngineSettings:
    """The typed settings of a model.json object (see the module's docstring for ``strict``)."""
    values: dict[str, Any] = {}
    for key, kind in _KINDS.items():
        if key not in engine_args or engine_args[key] is None:
            continue
        value = engine_args[key]
        try:
            values[key] = _coerce(kind, value)
        except ValueError as exc:
            if strict:
                raise UsageError(f"{key}: expected {exc}, got {_shown(value)}") from None
        if strict and kind is float and abs(values[key]) >= HUGE:
            raise UsageError(f"{key}: {_shown(value)} is out of range for a GPU setting")
    return EngineSettings(**values)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _positive(value: int | None) -> int:
    return value if value is not None and value > 0 else 1


def _coerce(kind: type, value: Any) -> Any:
    """``value`` as ``kind``; ValueError (its message: what was expected) when it is not one."""
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError("true or false")
    if kind is int:
        if isinstance(value, bool):
            raise ValueError("an integer")
        if isinstance(value, float):
            if value.is_integer():
                return int(value)
            raise ValueError("an integer")
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError("an integer") from None
    if kind is float:
        if isinstance(value, bool):
            raise ValueError("a number")
        if isinstance(value, int):  # beyond float's range (10**400): just "far too much" (or too little)
            return float(max(min(value, HUGE), -HUGE))
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("a number") from None
        if math.isnan(number):
            raise ValueError("a number")
        return max(min(number, HUGE), -HUGE)
    if isinstance(value, (dict, list)):
        raise ValueError("a string")
    return str(value)
