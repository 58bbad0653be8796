"""What changes between vLLM releases in the memory budget.

Read off vLLM's source per release (vllm/config/cache.py, vllm/engine/arg_utils.py get_batch_defaults,
vllm/v1/worker/gpu_worker.py determine_available_memory, vllm/config/vllm.py use_v2_model_runner):

- V0 engine (before 0.8): budget = total x utilization - (weights + activation peak + non-torch); CUDA graphs are
  captured afterwards and are not budgeted. Without chunked prefill the profile runs max(max_model_len, 2048)
  tokens; chunked prefill is on by default only above 32k context.
- V1 engine (0.8 on): same budget with the V1 batch defaults (by usage context and GPU size).
- 0.21: the CUDA-graph memory estimate is subtracted by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1,
  "default since v0.21.0"); the V1 scheduler keeps two batches in flight, which the KV cache layout has to hold.
  The default gpu_memory_utilization (0.92 from 0.20, 0.9 before) is read from each release's bundled EngineArgs
  schema.
- 0.25: dense decoder models run on Model Runner V2, whose profile_cudagraph_memory() returned 0 until its own
  estimator landed (we take 0.28); its compiled profile run has a peak of its own (measured on vLLM 0.26.0).
- 0.29: Model Runner V2 for every model.
- 0.30: GPUs with >= 160 GiB (B200/B300) get the largest batch defaults for the API server as well.
- 0.33: the KV cache reserves a null block before it serves the first request.
The release boundaries after 0.21 are taken from the merge dates of the PRs and are flagged where they matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from vllm_repo.errors import UsageError
from vllm_repo.releases.bundled import NEWEST_KNOWN

if TYPE_CHECKING:
    from vllm_repo.estimate.gpus import Gpu

USAGE_CONTEXTS = ("engine", "server", "llm")
"""engine: AsyncLLM.from_engine_args, which Triton's vLLM backend uses; server: `vllm serve`; llm: the LLM class."""


@dataclass(frozen=True)
class Release:
    version: Version

    @property
    def v0_engine(self) -> bool:
        return self.version < Version("0.8.0")

    @property
    def default_gpu_memory_utilization(self) -> float:
        """EngineArgs' default in this release, from its bundled schema (0.92 from 0.20, 0.9 before)."""
        from vllm_repo.schema.loader import schema_for_release

        schema = schema_for_release(self.version.base_version)
        return schema.default_gpu_memory_utilization if schema is not None else 0.9

    @property
    def cudagraph_estimate_subtracted(self) -> bool:
        return self.version >= Version("0.21.0")

    @property
    def batches_in_flight(self) -> int:
        """The batches the scheduler keeps in flight at once, which the KV cache must hold together."""
        return 2 if self.version >= Version("0.21.0") and not self.v0_engine else 1

    @property
    def reserves_null_block(self) -> bool:
        """Whether one KV cache block is set aside (the null block) before any request is served."""
        return self.version >= Version("0.33.0")

    def uses_model_runner_v2(self, *, is_moe: bool, is_hybrid: bool) -> bool:
        if self.version >= Version("0.29.0"):
            return True
        return self.version >= Version("0.25.0") and not is_moe and not is_hybrid

    @property
    def model_runner_v2_profiles_cudagraphs(self) -> bool:
        return self.version >= Version("0.28.0")

    def chunked_prefill(self, max_model_len: int, explicit: bool | None) -> bool:
        if explicit is not None:
            return explicit
        if self.v0_engine:
            return max_model_len > 32768
        return True

    def batch_defaults(self, gpu: Gpu, usage_context: str, world_size: int = 1) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) before the max_model_len adjustments."""
        if self.v0_engine:
            return 2048, 256
        if usage_context == "engine":
            # No usage-context entry: SchedulerConfig's own defaults.
            return 2048, 128
        total_gib = gpu.total_gib
        if self.version >= Version("0.30.0") and total_gib >= 160:
            return 16384, 1024
        if total_gib >= 70 and not gpu.is_a100:
            return (16384, 1024) if usage_context == "llm" else (8192, 1024)
        return (8192, 256) if usage_context == "llm" else (2048, 256)

    def scheduler_limits(
        self,
        gpu: Gpu,
        usage_context: str,
        max_model_len: int,
        *,
        max_num_batched_tokens: int | None,
        max_num_seqs: int | None,
        enable_chunked_prefill: bool | None = None,
        world_size: int = 1,
    ) -> tuple[int, int]:
        """The (max_num_batched_tokens, max_num_seqs) vLLM ends up with, as EngineArgs derives them."""
        default_tokens, default_seqs = self.batch_defaults(gpu, usage_context, world_size)
        chunked = self.chunked_prefill(max_model_len, enable_chunked_prefill)
        tokens = max_num_batched_tokens
        seqs = max_num_seqs if max_num_seqs is not None else default_seqs
        if tokens is None:
            if self.v0_engine:
                tokens = 512 if chunked else max(max_model_len, default_tokens)
            else:
                tokens = default_tokens if chunked else max(max_model_len, default_tokens)
                tokens = min(seqs * max_model_len, tokens)
        if max_num_seqs is None and not self.v0_engine:
            seqs = min(seqs, tokens)
        return tokens, seqs


def resolve_release(version: str | None, start: Path | None = None) -> tuple[Release, str]:
    """The release to model and a sentence saying why: the one every command checks against
    (schema.loader.target_vllm_version), else the newest known."""
    from vllm_repo.schema.loader import target_vllm_version

    version, origin = target_vllm_version(version, start)
    if not version:
        return Release(Version(NEWEST_KNOWN)), f"{origin}: modelling {NEWEST_KNOWN}"
    try:
        parsed = Version(Version(version).base_version)
    except InvalidVersion:
        raise UsageError(f"'{version}' is not a vLLM version number", hint="give a release such as 0.26.0") from None
    return Release(parsed), f"{origin} {version}"
