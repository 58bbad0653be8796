"""The candidate space tune searches: which engine settings it tries, and which of them the memory estimator rules
out before anything starts. Pure logic; the estimate runs on the model's facts, read offline.

A candidate is the model's own model.json with some settings changed:

- the batching settings, ``max_num_seqs`` and ``max_num_batched_tokens``: a value, or absent (vLLM's default). The
  candidate with neither is vLLM's defaults, the baseline every other one is compared with;
- switches: ``enable_prefix_caching``, ``enable_chunked_prefill`` and the CUDA-graph capture size, each tried the
  other way from what the file (or vLLM's default) has;
- the layout, where the host has more than one GPU: tensor parallelism (``tensor_parallel_size``) against more
  engines (Triton instances), ``tp x instances`` GPUs in all.

Sizing a candidate: the estimator's memory split for its settings on the GPU; it is dropped when vLLM would not start
(``fits`` false) or when its KV cache cannot hold the load, that is ``min(max_num_seqs, the load's concurrency)``
requests of input plus output tokens each, in whole KV blocks. Without a GPU the engine's KV cache is the CPU's
(``VLLM_CPU_KVCACHE_SPACE``), and only that check applies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

BATCHING = ("max_num_seqs", "max_num_batched_tokens")
PREFIX_CACHING = "enable_prefix_caching"
CHUNKED_PREFILL = "enable_chunked_prefill"
# The engine argument that bounds CUDA-graph capture, by release: the newest first.
GRAPH_KEYS = ("max_cudagraph_capture_size", "cuda_graph_sizes")
SWITCHES = (PREFIX_CACHING, CHUNKED_PREFILL, "cudagraph")
# Where no list is given: max_num_seqs in powers of two up to the load's concurrency, at most this many values;
# max_num_batched_tokens in powers of two from 1,024 to 16,384 (vLLM's V1 defaults are 2,048 to 16,384).
SEQS_VALUES = 5
TOKENS_VALUES = (1024, 2048, 4096, 8192, 16384)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """model.json's settings changed by ``changes`` (None: the key removed, vLLM's default), run as ``instances``
    engines (Triton instances); ``stage`` is the search stage that proposed it."""

    changes: tuple[tuple[str, Any], ...] = ()
    instances: int = 1
    stage: str = "defaults"

    @staticmethod
    def of(changes: Mapping[str, Any], instances: int = 1, stage: str = "defaults") -> Candidate:
        return Candidate(tuple(sorted(changes.items())), instances, stage)

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.changes)

    def key(self) -> tuple[tuple[tuple[str, str], ...], int]:
        """What makes two candidates the same engine (the stage that proposed it does not)."""
        return tuple((k, repr(v)) for k, v in self.changes if v is not None), self.instances

    def with_changes(self, stage: str, instances: int | None = None, **changes: Any) -> Candidate:
        return Candidate.of({**self.settings, **changes}, self.instances if instances is None else instances, stage)

    @property
    def name(self) -> str:
        parts = [f"{k}={_value_text(v)}" for k, v in self.changes if v is not None]
        if self.instances > 1:
            parts.append(f"instances={self.instances}")
        return " ".join(parts) or "defaults"


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


@dataclasses.dataclass(frozen=True)
class Switch:
    """A setting tried the other way on the best candidate so far: ``value_for(best)`` is the value to try, or None
    where there is nothing to try (``skipped`` says why, once, for the report)."""

    key: str
    value_for: Callable[[Candidate], Any]
    skipped: str | None = None


@dataclasses.dataclass
class Axes:
    """The values the search may try on each axis, in order. ``layouts``: (tensor_parallel_size, instances) pairs."""

    max_num_seqs: list[int]
    max_num_batched_tokens: list[int]
    switches: list[Switch]
    layouts: list[tuple[int, int]]


def powers_of_two(low: int, high: int) -> list[int]:
    """Every power of two from ``low`` to ``high``, and ``high`` itself."""
    values, v = [], 1
    while v <= high:
        if v >= low:
            values.append(v)
        v *= 2
    if high not in values and high >= low:
        values.append(high)
    return values


def default_seqs(concurrency: int) -> list[int]:
    """max_num_seqs values for a load of ``concurrency`` requests in flight: powers of two up to it, the largest
    SEQS_VALUES of them (more sequences than are ever in flight change nothing)."""
    return powers_of_two(1, max(concurrency, 1))[-SEQS_VALUES:]


def default_tokens(max_num_seqs: Sequence[int]) -> list[int]:
    """max_num_batched_tokens values: TOKENS_VALUES, none below the smallest max_num_seqs (vLLM refuses a budget
    smaller than the sequences it must batch)."""
    floor = min(max_num_seqs, default=1)
    return [t for t in TOKENS_VALUES if t >= floor]


def layouts(num_gpus: int, tensor_parallel_size: int, num_heads: int) -> list[tuple[int, int]]:
    """(tensor_parallel_size, instances) pairs that use the host's GPUs: one engine across all of them, one engine
    per GPU, and what lies between, with a tensor_parallel_size that divides the attention heads. Nothing to try on
    a host of one GPU. The model's current layout stays among them."""
    if num_gpus <= 1:
        return []
    found = []
    for tp in range(1, num_gpus + 1):
        if num_gpus % tp == 0 and num_heads % tp == 0 and tp >= tensor_parallel_size:
            found.append((tp, num_gpus // tp))
    return found if len(found) > 1 else []


def graph_switch(
    keys: set[str], enforce_eager: bool, current: Any, graph_default_max: int = 512
) -> tuple[str | None, str | None]:
    """(the engine argument for the CUDA-graph capture size in this release, or None and why not)."""
    if enforce_eager:
        return None, "enforce_eager is set: the engine captures no CUDA graphs"
    key = next((k for k in GRAPH_KEYS if k in keys), None)
    if key is None:
        return None, "this vLLM release has no engine argument for the capture sizes"
    if current is not None:
        return None, f"model.json sets {key} already"
    return key, None


def capture_size(max_num_seqs: int) -> int:
    """The capture size that covers a decode batch of ``max_num_seqs`` sequences: vLLM captures multiples of 8 up to
    256 and of 16 above."""
    step = 8 if max_num_seqs <= 256 else 16
    return max(step, math.ceil(max_num_seqs / step) * step)


# ---------------------------------------------------------------------------------------------------------------------
# Sizing
# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Sizing:
    """What the estimator says of one candidate. ``dropped``: why it is not run (None: it may run)."""

    dropped: str | None
    kv_cache_tokens: int | None = None
    needed_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    fits: bool | None = None  # None: not sized against a GPU (the CPU's KV cache only)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "dropped" and v is not None}


def kv_holds(kv_cache_tokens: int, requests: int, tokens_per_request: int, block_size: int) -> tuple[bool, int]:
    """Whether a KV cache of ``kv_cache_tokens`` holds ``requests`` requests of ``tokens_per_request`` tokens at once
    (each in whole blocks of ``block_size``), and the tokens they take."""
    blocks = math.ceil(tokens_per_request / max(block_size, 1))
    needed = requests * blocks * max(block_size, 1)
    return kv_cache_tokens >= needed, needed


def judge(
    *,
    fits: bool | None,
    error: str | None,
    kv_cache_tokens: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    block_size: int,
    concurrency: int,
    tokens_per_request: int,
    where: str,
) -> Sizing:
    """The verdict on one estimate: dropped when vLLM would not start, or when the KV cache cannot hold the requests
    the engine runs at once under the load (``concurrency``, at most ``max_num_seqs`` of them)."""
    sizing = Sizing(
        None,
        kv_cache_tokens=kv_cache_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        fits=fits,
    )
    if fits is False:
        sizing.dropped = f"does not fit {where}: {error or 'the estimate says vLLM would not start'}"
        return sizing
    running = min(max_num_seqs, concurrency)
    holds, needed = kv_holds(kv_cache_tokens, running, tokens_per_request, block_size)
    sizing.needed_tokens = needed
    if not holds:
        sizing.dropped = (
            f"its KV cache ({kv_cache_tokens:,} tokens {where}) cannot hold the load: {running} requests of "
            f"{tokens_per_request:,} tokens at once need {needed:,}"
        )
    return sizing
