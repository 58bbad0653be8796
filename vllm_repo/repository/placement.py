"""Where each model's vLLM engine runs and how much of each GPU it claims, as config.pbtxt and model.json say: what
the GPU-sharing check (VR504) adds up, and what init leaves for a new model."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from vllm_repo.repository.discovery import ModelDirectory, ModelRepository
from vllm_repo.repository.documents import JsonDocument

# An absurd tensor_parallel_size must not build a huge set of GPU ids.
MAX_GPU_IDS = 1024


@dataclasses.dataclass(frozen=True)
class Engine:
    model: ModelDirectory
    engine_args: JsonDocument
    fraction: float  # gpu_memory_utilization: the share of each of its GPUs' memory it claims
    gpus: frozenset[int] | None  # the GPU ids it allocates on; None: every visible GPU


def positive_int(value: Any, default: int = 1) -> int:
    """An engine argument that must be a positive integer, or ``default`` where the file has something else (a
    wrong value is VR303/VR305's finding, not a reason for the other checks to stop)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def parallel_size(engine_args: dict) -> int:
    """The GPUs one engine uses: tensor_parallel_size x pipeline_parallel_size."""
    return positive_int(engine_args.get("tensor_parallel_size")) * positive_int(
        engine_args.get("pipeline_parallel_size")
    )


def default_memory_fraction(schema: Any) -> float:
    """vLLM's default gpu_memory_utilization in the release ``schema`` describes (0.9 where it says none)."""
    field = schema.get("gpu_memory_utilization") if schema is not None else None
    default = field.default if field is not None else None
    return float(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else 0.9


def engine_gpus(model: ModelDirectory, engine_args: dict) -> frozenset[int] | None:
    """The GPUs an engine of ``model`` allocates on; None means every visible GPU (Triton's default instance group,
    or KIND_GPU without gpus: one instance per GPU)."""
    size = parallel_size(engine_args)
    config = model.config.config if model.config is not None else None
    groups = list(config.instance_group) if config is not None else []
    if not groups:
        return None
    from vllm_repo.repository.model_config import model_config_pb2

    kinds = model_config_pb2().ModelInstanceGroup
    gpus: set[int] = set()
    for group in groups:
        if group.kind == kinds.KIND_GPU:
            if not group.gpus:
                return None
            gpus.update(group.gpus)
        elif group.kind in (kinds.KIND_MODEL, kinds.KIND_AUTO):
            gpus.update(range(min(size, MAX_GPU_IDS)))  # vLLM takes the first visible GPUs
    return frozenset(gpus)


def memory_fraction(engine_args: dict, default: float) -> float:
    value = engine_args.get("gpu_memory_utilization")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(max(min(value, 1e300), -1e300))  # ints beyond float range: just "far too much/little"
    return default


def engines(models: Iterable[ModelDirectory], default_fraction: float) -> list[Engine]:
    """The vLLM engines of ``models`` (those with a readable model.json)."""
    found = []
    for model in models:
        doc = model.checked_engine_args()
        if doc is not None:
            found.append(Engine(model, doc, memory_fraction(doc.data, default_fraction), engine_gpus(model, doc.data)))
    return found


def sharing(engines_: Iterable[Engine], gpu: int) -> list[Engine]:
    return [e for e in engines_ if e.gpus is None or gpu in e.gpus]


def fraction_left(
    repository: ModelRepository, gpus: Iterable[int], default_fraction: float, without: str | None = None
) -> tuple[float, list[Engine]]:
    """The share of memory left on the fullest of ``gpus`` by the repository's engines (leaving out model
    ``without``, the one being replaced), and the engines on that GPU."""
    others = engines((m for m in repository.models if m.name != without), default_fraction)
    worst: tuple[float, list[Engine]] = (1.0, [])
    for gpu in gpus:
        on_it = sharing(others, gpu)
        left = 1.0 - sum(e.fraction for e in on_it)
        if left < worst[0]:
            worst = (left, on_it)
    return worst
