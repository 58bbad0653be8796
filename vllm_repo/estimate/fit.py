"""Size a model for a GPU at init time: tensor_parallel_size, gpu_memory_utilization and max_model_len from the
memory estimator (vllm_repo.estimate).

Starts from what the user fixed (--tp, --max-model-len, --set) and vLLM's defaults for the rest, then follows the
estimator's own recommendations (a larger tensor_parallel_size, a higher gpu_memory_utilization, a shorter
max_model_len) until the model fits, never changing a value the user gave. What could not be worked out (model config
unreachable offline, no fit at all) is said in the notes; init still writes the files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_repo.estimate.memory import MemoryEstimate

if TYPE_CHECKING:
    from vllm_repo.estimate.model_facts import ModelFacts
    from vllm_repo.repository.engine_settings import EngineSettings

_MAX_ROUNDS = 4
_SIZES = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len")
# Below this a single GPU is not worth it when more GPUs would hold the model's context.
USEFUL_CONTEXT = 8192


def parse_gpu(text: str) -> tuple[str, int | None]:
    """ "H100" -> ("H100", None); "2xL4", "2 x L4", "L4x2" -> ("L4", 2)."""
    text = text.strip()
    match = re.fullmatch(r"(\d+)\s*[x*]\s*(.+)", text, flags=re.I) or None
    if match:
        return match.group(2).strip(), int(match.group(1))
    match = re.fullmatch(r"(.+?)\s*[x*]\s*(\d+)", text, flags=re.I)
    if match and not re.search(r"\d\s*[x*]\s*\d+$", match.group(1)):
        return match.group(1).strip(), int(match.group(2))
    return text, None


def fit_engine_settings(
    model: str,
    gpu: str,
    *,
    tensor_parallel_size: int | None = None,
    max_model_len: int | None = None,
    user_settings: dict[str, Any] | None = None,
    max_utilization: float | None = None,
) -> tuple[dict[str, int | float], list[str]]:
    """(settings for model.json, notes). max_utilization: the most gpu_memory_utilization may be raised to (what the
    GPU's other engines leave, less a margin). Raises UnknownGpuError for a GPU name the catalog doesn't know."""
    from vllm_repo.estimate import EstimateError, ModelFactsError, UnknownGpuError, load_model_facts
    from vllm_repo.repository.engine_settings import read_engine_settings

    name, count = parse_gpu(gpu)
    # What the user fixed stays; a value of the wrong form in --set is left to validate, as init writes it.
    start = read_engine_settings(user_settings or {})
    if start.tensor_parallel_size is None and tensor_parallel_size is not None:
        start = start.replace(tensor_parallel_size=tensor_parallel_size)
    if start.max_model_len is None and max_model_len is not None:
        start = start.replace(max_model_len=max_model_len)
    try:
        facts = load_model_facts(model)
    except ModelFactsError as exc:
        return {}, [
            f"could not size the engine for {gpu}: {exc}; tensor_parallel_size, gpu_memory_utilization and "
            "max_model_len are left to vLLM's defaults"
        ]
    fitting = _Fitting(model, name, facts, start, max_utilization)
    try:
        est, changes = fitting.best_fit(count)
    except UnknownGpuError as exc:
        raise UnknownGpuError(
            exc.message,
            hint="name a GPU from `vllm-repo gpus` (--gpu H100, --gpu 2xL4), or give its memory in GiB, e.g. --gpu 24",
        ) from None
    except EstimateError as exc:
        return {}, [f"could not size the engine for {gpu}: {exc}"]
    return _fitted_settings(model, est, changes, count)


@dataclass(frozen=True)
class _Fitting:
    """One model's sizing for one GPU type, from the user's settings."""

    model: str
    gpu_name: str
    facts: ModelFacts
    start: EngineSettings
    max_utilization: float | None

    @property
    def fixed(self) -> set[str]:
        """The sizes the user gave, which fitting never changes."""
        return {key for key in _SIZES if getattr(self.start, key) is not None}

    def best_fit(self, count: int | None) -> tuple[MemoryEstimate, dict[str, int | float | str]]:
        """The estimate on ``count`` GPUs (or as many as the user's tensor_parallel_size), and what changed to fit;
        with no count, one GPU unless more hold a useful context that one can't."""
        if count is not None or "tensor_parallel_size" in self.fixed:
            return self.fit(count or self.start.tensor_parallel_size)
        # "--gpu L4" is one L4 unless one GPU can't hold a useful context; then say how many it takes.
        est, changes = self.fit(1)
        useful = min(USEFUL_CONTEXT, self.facts.arch.max_position_embeddings or USEFUL_CONTEXT)
        if not est.fits or est.max_model_len < useful:
            more, more_changes = self.fit(None)
            if more.fits and (not est.fits or more.max_model_len > est.max_model_len):
                return more, more_changes
        return est, changes

    def fit(self, num_gpus: int | None) -> tuple[MemoryEstimate, dict[str, int | float | str]]:
        """Follow the estimator's recommendations from the user's settings; returns (estimate, what changed)."""
        fixed = self.fixed
        changes: dict[str, int | float | str] = {}
        est = self.estimate(num_gpus, self.start)
        for _ in range(_MAX_ROUNDS):
            if est.fits and not est.recommendations:
                break
            usable = [
                r
                for r in est.recommendations
                if r.setting in _SIZES and r.setting not in fixed and r.setting not in changes
            ]
            if not usable:
                break
            changes[usable[0].setting] = usable[0].value
            est = self.estimate(num_gpus, self.start.replace(**changes))
        return est, changes

    def estimate(self, num_gpus: int | None, settings: EngineSettings) -> MemoryEstimate:
        from vllm_repo.estimate import estimate_model

        return estimate_model(
            self.model,
            self.gpu_name,
            num_gpus=num_gpus,
            facts=self.facts,
            settings=settings,
            max_utilization=self.max_utilization,
        )


def _fitted_settings(
    model: str, est: MemoryEstimate, changes: dict[str, int | float | str], count: int | None
) -> tuple[dict[str, int | float], list[str]]:
    """The sizes to write and the notes that say why; no sizes where nothing fits."""
    where = f"{est.tensor_parallel_size} x {est.gpu}" if est.tensor_parallel_size > 1 else est.gpu
    if not est.fits:
        # Nothing that fits: leave the sizes unset rather than write values known not to start.
        why = est.error or "the estimate says vLLM would not start"
        available = f"{count} x {est.gpu}" if count else where
        return {}, [
            f"could not fit {model} on {available}: {why}; tensor_parallel_size, gpu_memory_utilization and "
            "max_model_len are left unset",
            *(f"try {r.setting}={r.value}: {r.reason}" for r in est.recommendations),
        ]
    settings: dict[str, int | float] = {
        "tensor_parallel_size": est.tensor_parallel_size,
        "gpu_memory_utilization": est.gpu_memory_utilization,
        "max_model_len": est.max_model_len,
    }
    notes = [
        f"sized for {where}: weights {est.weights_gib:.2f} GiB and KV cache {est.kv_cache_gib:.2f} GiB "
        f"per GPU "
        f"({est.kv_cache_tokens:,} tokens, {est.max_concurrency:.1f} requests of {est.max_model_len:,} tokens "
        f"at once)"
    ]
    if changes:
        notes.append("changed to fit: " + ", ".join(f"{k}={v}" for k, v in changes.items()))
    return settings, notes
