"""Where each model's vLLM engines run and how much of each GPU they claim, as config.pbtxt and model.json say: what
the placement checks (VR504, VR506 to VR508) read, and what init leaves for a new model.

Each model instance Triton creates starts its own engine. Where it runs follows Triton and the bundled backend
(backend/model.py ``plan_visible_devices``): KIND_GPU puts ``count`` instances on each GPU it lists (on every GPU
when it lists none); KIND_MODEL instance k runs on GPU_DEVICE_IDS' group k ("0,1;2,3"), on its only group for every
instance ("0,1"), or without it on GPUs [k x size, (k+1) x size), size being tensor x pipeline parallel."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from vllm_repo.repository.discovery import ModelDirectory, ModelRepository
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.repository.engine_settings import EngineSettings, read_engine_settings

# An absurd tensor_parallel_size must not build a huge set of GPU ids.
MAX_GPU_IDS = 1024


GPU_DEVICE_IDS = "GPU_DEVICE_IDS"


@dataclasses.dataclass(frozen=True)
class Engine:
    model: ModelDirectory
    engine_args: JsonDocument
    settings: EngineSettings
    fraction: float  # gpu_memory_utilization: the share of each of its GPUs' memory it claims
    gpus: frozenset[int] | None  # the GPU ids it allocates on; None: every visible GPU


@dataclasses.dataclass(frozen=True)
class Instance:
    """One engine Triton starts for a model: instance ``index`` of instance_group[``group``]."""

    model: ModelDirectory
    engine_args: JsonDocument
    settings: EngineSettings
    fraction: float
    gpus: frozenset[int] | None  # None: one such instance on every visible GPU
    group: int
    index: int
    kind: str  # "KIND_GPU", "KIND_MODEL", ...; "default" where config.pbtxt has no instance_group


@dataclasses.dataclass(frozen=True)
class DeviceIds:
    """config.pbtxt's GPU_DEVICE_IDS parameter, read as the backend reads it."""

    text: str
    groups: tuple[tuple[int, ...], ...] | None  # None: not a list of GPU ids, the backend refuses it

    def group_for(self, index: int) -> tuple[int, ...] | None:
        """The GPUs of instance ``index``: its own group, the only group for every instance, or None (no group)."""
        if not self.groups:
            return None
        if len(self.groups) == 1:
            return self.groups[0]
        return self.groups[index] if index < len(self.groups) else None


def device_ids(model: ModelDirectory) -> DeviceIds | None:
    """GPU_DEVICE_IDS of ``model``'s config.pbtxt, or None where it has none."""
    config = model.config.config if model.config is not None else None
    param = config.parameters.get(GPU_DEVICE_IDS) if config is not None else None
    if param is None or not param.string_value.strip():
        return None
    text = param.string_value
    groups = []
    for part in text.split(";"):
        if not part.strip():
            continue
        try:
            groups.append(tuple(int(x) for x in part.split(",")))
        except ValueError:
            return DeviceIds(text, None)
    return DeviceIds(text, tuple(groups) or None)


def _gpu_range(start: int, size: int) -> frozenset[int]:
    return frozenset(range(min(start, MAX_GPU_IDS), min(start + size, MAX_GPU_IDS)))


def placements(model: ModelDirectory, settings: EngineSettings) -> list[tuple[frozenset[int] | None, int, int, str]]:
    """(GPUs, instance_group index, instance index, kind) of each engine Triton starts for ``model``; GPUs None: one
    such instance on every visible GPU. KIND_CPU instances are left out (VR207 reports them)."""
    size = settings.parallel_size
    config = model.config.config if model.config is not None else None
    groups = list(config.instance_group) if config is not None else []
    if not groups:
        return [(None, 0, 0, "default")]
    from vllm_repo.repository.model_config import model_config_pb2

    kinds = model_config_pb2().ModelInstanceGroup
    ids = device_ids(model)
    found: list[tuple[frozenset[int] | None, int, int, str]] = []
    for number, group in enumerate(groups):
        count = min(max(group.count, 1), MAX_GPU_IDS)  # Triton's count defaults to 1
        if group.kind == kinds.KIND_GPU:
            for gpu in group.gpus or [None]:
                gpus = None if gpu is None else frozenset({gpu})
                found.extend((gpus, number, k, "KIND_GPU") for k in range(count))
        elif group.kind == kinds.KIND_MODEL:
            for k in range(count):
                listed = ids.group_for(k) if ids is not None else None
                gpus = frozenset(listed) if listed is not None else _gpu_range(k * size, size)
                found.append((gpus, number, k, "KIND_MODEL"))
        elif group.kind == kinds.KIND_AUTO:
            found.append((_gpu_range(0, size), number, 0, "KIND_AUTO"))  # vLLM takes the first visible GPUs
    return found


def instances(engine: Engine) -> list[Instance]:
    """The engines Triton starts for ``engine``'s model, each with the GPUs it runs on."""
    return [
        Instance(engine.model, engine.engine_args, engine.settings, engine.fraction, gpus, group, index, kind)
        for gpus, group, index, kind in placements(engine.model, engine.settings)
    ]


def engine_gpus(model: ModelDirectory, settings: EngineSettings) -> frozenset[int] | None:
    """The GPUs the engines of ``model`` allocate on; None means every visible GPU (Triton's default instance group,
    or KIND_GPU without gpus: one instance per GPU)."""
    placed = [gpus for gpus, *_ in placements(model, settings)]
    gpu_sets = [gpus for gpus in placed if gpus is not None]
    if len(gpu_sets) < len(placed):
        return None
    return frozenset().union(*gpu_sets)


def engines(models: Iterable[ModelDirectory], default_fraction: float) -> list[Engine]:
    """The vLLM engines of ``models`` (those with a readable model.json)."""
    found = []
    for model in models:
        doc = model.checked_engine_args()
        if doc is not None:
            settings = read_engine_settings(doc.data)
            fraction = settings.gpu_memory_utilization_or(default_fraction)
            found.append(Engine(model, doc, settings, fraction, engine_gpus(model, settings)))
    return found


def all_instances(models: Iterable[ModelDirectory], default_fraction: float) -> list[Instance]:
    """The engines of every vLLM model in ``models`` (those with a readable model.json), one per model instance."""
    return [i for e in engines(models, default_fraction) for i in instances(e)]


def sharing(placed: Iterable[Engine | Instance], gpu: int) -> list:
    return [e for e in placed if e.gpus is None or gpu in e.gpus]


def fraction_left(
    repository: ModelRepository, gpus: Iterable[int], default_fraction: float, without: str | None = None
) -> tuple[float, list[Engine]]:
    """The share of memory left on the fullest of ``gpus`` by the repository's engines (leaving out model
    ``without``, the one being replaced), and the engines on that GPU (one per model instance)."""
    others = all_instances((m for m in repository.models if m.name != without), default_fraction)
    worst: tuple[float, list[Engine]] = (1.0, [])
    for gpu in gpus:
        on_it = sharing(others, gpu)
        left = 1.0 - sum(e.fraction for e in on_it)
        if left < worst[0]:
            worst = (left, on_it)
    return worst
