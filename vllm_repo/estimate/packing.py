"""`vllm-repo plan --pack`: several vLLM engines on one GPU, each with an absolute memory budget.

An engine started with ``gpu_memory_utilization`` claims that share of the *whole* GPU and, while it profiles, counts
what every other process allocates meanwhile as its own; engines that start together on one GPU therefore fail the
start-up check ("Free memory on device ... is less than desired GPU memory utilization") or get a fraction of the KV
cache they should. A packed engine instead gets its KV cache in bytes (``kv_cache_memory_bytes``, from vLLM 0.10.2),
which vLLM allocates without measuring anyone, and a ``gpu_memory_utilization`` equal to its own whole footprint, which
vLLM then only checks to be free when the engine starts.

Each engine's footprint is what the estimator says one engine of it takes besides its KV cache (weights, the activation
peak of a full batch, CUDA graphs, non-torch memory and its CUDA context) plus the KV cache it is given. The KV caches
are sized so that the footprints of the engines on one GPU add up to the GPU's memory less a stated margin, every
engine holding the same multiple of the concurrency asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from packaging.version import Version

from vllm_repo.errors import VllmRepoError

if TYPE_CHECKING:
    from vllm_repo.estimate import Gpu, MemoryEstimate
    from vllm_repo.estimate.model_facts import ModelFacts
    from vllm_repo.releases.memory_budget import Release
    from vllm_repo.repository.engine_settings import EngineSettings

GiB = 1 << 30
MiB = 1 << 20

# What stays unallocated on a packed GPU: the other processes that hold memory there (tritonserver's own CUDA context,
# a monitoring agent) and the estimator's error. nvidia-smi's peak must stay below the GPU's memory by at least this.
DEFAULT_MARGIN_FRACTION = 0.05
# The first release whose EngineArgs take an absolute KV cache size.
ABSOLUTE_KV_RELEASE = Version("0.10.2")
# Before it, V1 engines (0.8 on) count only their own allocations while profiling, so a fraction equal to the engine's
# footprint gives the same KV cache, provided no other engine on the GPU is loading at the same time.
OWN_ALLOCATIONS_RELEASE = Version("0.8.0")


class PackError(VllmRepoError):
    pass


@dataclasses.dataclass(frozen=True)
class EngineCost:
    """One engine of a model on one GPU, before its KV cache is sized."""

    name: str
    settings: EngineSettings
    facts: ModelFacts
    alone: MemoryEstimate  # the engine with the GPU to itself (vLLM's default utilization): its fixed terms
    fixed_bytes: int  # weights + activation peak + CUDA graphs + non-torch + CUDA context
    kv_min_bytes: int  # the KV cache for the concurrency asked for
    concurrency: int

    @property
    def min_footprint_bytes(self) -> int:
        return self.fixed_bytes + self.kv_min_bytes


@dataclasses.dataclass(frozen=True)
class PackedEngine:
    cost: EngineCost
    kv_bytes: int  # its KV cache, as written to kv_cache_memory_bytes
    gpu_memory_utilization: float  # as written: its whole footprint, checked free by vLLM at start
    estimate: MemoryEstimate  # the engine with that KV cache: tokens and concurrency it holds

    @property
    def name(self) -> str:
        return self.cost.name

    @property
    def footprint_bytes(self) -> int:
        return self.cost.fixed_bytes + self.kv_bytes


@dataclasses.dataclass(frozen=True)
class PackedGpu:
    gpu: int
    total_bytes: int
    margin_bytes: int
    engines: tuple[PackedEngine, ...]

    @property
    def left_bytes(self) -> int:
        """What the packed engines leave of the GPU's memory (the margin included)."""
        return self.total_bytes - sum(e.footprint_bytes for e in self.engines)

    def explain(self, absolute: bool) -> list[str]:
        names = ", ".join(e.name for e in self.engines)
        lines = [f"GPU {self.gpu}: {len(self.engines)} engine{'s' * (len(self.engines) != 1)} packed ({names})"]
        for e in self.engines:
            est = e.cost.alone
            budget = f"kv_cache_memory_bytes {e.kv_bytes}" if absolute else "KV from the fraction"
            lines.append(
                f"  {e.name}: weights {est.weights_gib:.2f} GiB, activations {est.activation_gib:.2f} GiB, CUDA graphs "
                f"{_graphs_bytes(est) / GiB:.2f} GiB, non-torch + context {_overhead_bytes(est) / GiB:.2f} GiB, "
                f"KV cache {e.kv_bytes / GiB:.2f} GiB = {e.footprint_bytes / GiB:.2f} GiB "
                f"(gpu_memory_utilization {e.gpu_memory_utilization:g}, {budget})"
            )
            lines.append(
                f"    KV tokens {e.estimate.kv_cache_tokens:,} = {e.estimate.max_concurrency:.1f} sequences of "
                f"{e.estimate.max_model_len:,} tokens (asked: {e.cost.concurrency})"
            )
        lines.append(
            f"  left: {self.left_bytes / GiB:.2f} GiB of {self.total_bytes / GiB:.2f} GiB "
            f"(margin {self.margin_bytes / GiB:.2f} GiB)"
        )
        return lines


def _graphs_bytes(est: MemoryEstimate) -> int:
    # Releases that subtract an estimate from the budget, and those whose capture comes after the KV cache: the larger.
    return int(max(est.cudagraph_gib, est.cudagraph_capture_gib) * GiB)


def _overhead_bytes(est: MemoryEstimate) -> int:
    from vllm_repo.estimate.memory import CUDA_CONTEXT_GIB

    return int((est.non_torch_gib + CUDA_CONTEXT_GIB) * GiB)


def fixed_bytes(est: MemoryEstimate) -> int:
    """What one engine takes besides its KV cache."""
    return int((est.weights_gib + est.activation_gib) * GiB) + _graphs_bytes(est) + _overhead_bytes(est)


def budget_fraction(alone: MemoryEstimate, kv_bytes: int, total_bytes: int) -> float:
    """The gpu_memory_utilization whose budget is what vLLM subtracts from it (weights, activation peak, non-torch,
    the CUDA-graph estimate where the release subtracts one) plus ``kv_bytes``, rounded up to 1e-4 of the GPU. Before
    0.10.2 it is the budget that gives the engine that KV cache; from 0.10.2, beside kv_cache_memory_bytes, vLLM only
    checks that much memory is free when the engine starts."""
    subtracted = (alone.weights_gib + alone.activation_gib + alone.non_torch_gib + alone.cudagraph_gib) * GiB
    return math.ceil((subtracted + kv_bytes) / total_bytes * 10_000) / 10_000


def supports_absolute_kv(release: Release) -> bool:
    return release.version >= ABSOLUTE_KV_RELEASE


def engine_cost(
    name: str, settings: EngineSettings, facts: ModelFacts, gpu: Gpu, release: Release, concurrency: int
) -> EngineCost:
    """One engine of ``name`` on one GPU of ``gpu``: what it takes besides its KV cache, and the KV cache that holds
    ``concurrency`` sequences of max_model_len tokens."""
    from vllm_repo.estimate.memory import CUDA_CONTEXT_GIB, estimate

    single = settings.replace(
        tensor_parallel_size=1, pipeline_parallel_size=None, kv_cache_memory_bytes=None, gpu_memory_utilization=None
    )
    # Sized with all of the GPU but its CUDA context: whether it starts there at all, and its fixed terms (which do
    # not depend on the fraction).
    whole = math.floor((1 - CUDA_CONTEXT_GIB * GiB / gpu.total_bytes) * 1000) / 1000
    alone = estimate(facts, gpu, release, single.replace(gpu_memory_utilization=whole))
    if not alone.fits:
        raise PackError(
            f"{name} does not start on one {gpu.name} even alone, so it can't share one: {alone.error}",
            hint="plan without --pack gives it tensor parallelism; or lower max_model_len",
        )
    per_sequence = alone.kv_needed_one_request_gib * GiB
    # One block more than the sequences need: vLLM keeps a null block from 0.33, and the rounding of the figures above.
    kv_min = math.ceil(concurrency * per_sequence) + alone.kv_bytes_per_token * alone.block_size * 2
    return EngineCost(name, single, facts, alone, fixed_bytes(alone), kv_min, concurrency)


def fraction_room(taken: float, margin: float = DEFAULT_MARGIN_FRACTION) -> float:
    """The gpu_memory_utilization one more engine may take on a GPU whose other engines claim ``taken`` of it, the
    margin kept free as plan --pack keeps it: rounded down to a hundredth (negative when nothing is left)."""
    return math.floor((1 - margin - taken) * 100 + 1e-9) / 100


def margin_bytes(gpu: Gpu, margin_gib: float | None) -> int:
    return int(margin_gib * GiB) if margin_gib is not None else int(gpu.total_bytes * DEFAULT_MARGIN_FRACTION)


def assign_gpus(costs: Sequence[EngineCost], gpu_ids: Sequence[int], usable_bytes: int) -> dict[int, list[EngineCost]]:
    """First fit, largest first: each engine onto the first GPU whose usable memory still holds its smallest
    footprint. Raises PackError, with the numbers, when one does not fit anywhere."""
    placed: dict[int, list[EngineCost]] = {gpu: [] for gpu in gpu_ids}
    for cost in sorted(costs, key=lambda c: c.min_footprint_bytes, reverse=True):
        for gpu in gpu_ids:
            if sum(c.min_footprint_bytes for c in placed[gpu]) + cost.min_footprint_bytes <= usable_bytes:
                placed[gpu].append(cost)
                break
        else:
            fullest = min(gpu_ids, key=lambda g: usable_bytes - sum(c.min_footprint_bytes for c in placed[g]))
            on_it = placed[fullest]
            taken = sum(c.min_footprint_bytes for c in on_it)
            raise PackError(
                f"{cost.name} needs {cost.min_footprint_bytes / GiB:.2f} GiB for {cost.concurrency} sequence"
                f"{'s' * (cost.concurrency != 1)} of {cost.alone.max_model_len:,} tokens "
                f"({cost.fixed_bytes / GiB:.2f} GiB besides a {cost.kv_min_bytes / GiB:.2f} GiB KV cache); "
                f"GPU {fullest} has {(usable_bytes - taken) / GiB:.2f} GiB of {usable_bytes / GiB:.2f} GiB usable left"
                + (f" after {', '.join(c.name for c in on_it)}" if on_it else ""),
                hint="lower --concurrency or max_model_len, give more GPUs (--num-gpus), or a smaller --margin-gib",
            )
    return {gpu: costs_ for gpu, costs_ in placed.items() if costs_}


def size_kv(
    gpu_id: int, costs: Sequence[EngineCost], gpu: Gpu, release: Release, margin: int, absolute: bool
) -> PackedGpu:
    """The KV caches of the engines on one GPU: what the margin and the fixed terms leave, shared so that every engine
    holds the same multiple of the concurrency asked for."""
    from vllm_repo.estimate.memory import estimate

    total = gpu.total_bytes
    room = total - margin - sum(c.fixed_bytes for c in costs)
    need = sum(c.kv_min_bytes for c in costs)
    engines = []
    for cost in costs:
        kv = (room * cost.kv_min_bytes // need) // MiB * MiB  # whole MiB, rounded down: the sum stays under
        fraction = budget_fraction(cost.alone, kv, total)
        settings = cost.settings.replace(
            gpu_memory_utilization=fraction, kv_cache_memory_bytes=kv if absolute else None
        )
        engines.append(PackedEngine(cost, kv, fraction, estimate(cost.facts, gpu, release, settings)))
    return PackedGpu(gpu_id, total, margin, tuple(engines))


def pack(
    costs: Sequence[EngineCost],
    gpu: Gpu,
    release: Release,
    gpu_ids: Sequence[int],
    margin_gib: float | None = None,
) -> list[PackedGpu]:
    """Place ``costs``' engines onto the fewest of ``gpu_ids`` and size each one's KV cache."""
    if release.version < OWN_ALLOCATIONS_RELEASE:
        raise PackError(
            f"vLLM {release.version} counts every process's memory on the GPU as its own when it profiles, so "
            "engines can't be packed with a budget each",
            hint="pack for vLLM 0.8 or newer (--vllm-version), or give each model GPUs of its own (plan, no --pack)",
        )
    margin = margin_bytes(gpu, margin_gib)
    usable = gpu.total_bytes - margin
    absolute = supports_absolute_kv(release)
    return [
        size_kv(gpu_id, on_gpu, gpu, release, margin, absolute)
        for gpu_id, on_gpu in assign_gpus(costs, gpu_ids, usable).items()
    ]


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What one engine takes of a GPU it shares, as its model.json is written."""

    fixed_bytes: int  # weights, activation peak, CUDA graphs, non-torch, CUDA context
    kv_bytes: int
    absolute: bool  # the KV cache is kv_cache_memory_bytes (else what the fraction leaves)

    @property
    def total_bytes(self) -> int:
        return self.fixed_bytes + self.kv_bytes


def footprint(settings: EngineSettings, facts: ModelFacts, gpu: Gpu, release: Release) -> Footprint:
    """One engine's whole footprint on one of its GPUs: with kv_cache_memory_bytes, its fixed terms plus that; with
    a fraction only, the fraction of the GPU plus what lies outside vLLM's budget (its CUDA context, and CUDA graphs
    where the release captures them after the KV cache without subtracting an estimate)."""
    from vllm_repo.estimate.memory import CUDA_CONTEXT_GIB, estimate

    est = estimate(facts, gpu, release, settings)
    if settings.kv_cache_memory_bytes and supports_absolute_kv(release):
        return Footprint(fixed_bytes(est), settings.kv_cache_memory_bytes, True)
    outside = int((CUDA_CONTEXT_GIB + (0 if est.cudagraph_gib else est.cudagraph_capture_gib)) * GiB)
    budget = int(est.requested_gib * GiB)
    kv = max(int(est.kv_cache_gib * GiB), 0)
    return Footprint(budget - kv + outside, kv, False)
