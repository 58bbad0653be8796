"""Sizing before measuring: the GPU to size for (nvidia-smi's, --gpu, or the CPU's KV cache), the load in requests
and tokens, the estimator's verdict on each candidate (remembered), and the values and switches the search tries."""

from __future__ import annotations

import dataclasses
import functools
import math
import subprocess
from pathlib import Path
from typing import Any

from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.tune.candidates import candidate_args
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.space import (
    CHUNKED_PREFILL,
    GRAPH_KEYS,
    PREFIX_CACHING,
    SWITCHES,
    Axes,
    Candidate,
    Sizing,
    Switch,
    capture_size,
    default_seqs,
    default_tokens,
    graph_switch,
    judge,
    layouts,
)
from vllm_repo.tune.spec import DEFAULT_CONCURRENCY, TuneSpec

# A large nominal GPU for sizing the CPU's KV cache: only kv_cache_memory_bytes bounds it there.
CPU_NOMINAL_GPU_GIB = 4096.0


def load_concurrency(spec: TuneSpec) -> int | None:
    """How many requests the load keeps in flight: the largest --concurrency; for request rates, by Little's law,
    the rate times the longest a request may take and still meet the SLO (None where the SLO does not bound it)."""
    if not spec.request_rates:
        return max(spec.concurrency or [DEFAULT_CONCURRENCY])
    slo = spec.slo
    if slo.e2e_p99_ms is not None:
        longest_ms = slo.e2e_p99_ms
    elif slo.ttft_p99_ms is not None and slo.itl_p99_ms is not None:
        longest_ms = slo.ttft_p99_ms + slo.itl_p99_ms * max(spec.output_tokens - 1, 0)
    else:
        return None
    return max(1, math.ceil(max(spec.request_rates) * longest_ms / 1000))


def tokens_per_request(spec: TuneSpec) -> tuple[int, bool]:
    """Tokens of KV cache one request takes at its end (prompt and output), and whether that is approximate (a
    dataset's prompts are counted at about four bytes a token)."""
    if spec.dataset is None:
        return spec.input_len + spec.output_tokens, False
    from vllm_repo.benchmark.prompts import load_dataset

    prompts = load_dataset(spec.dataset, spec.output_len)
    mean = sum(math.ceil(len(p.text.encode()) / 4) + p.output_len for p in prompts) / max(len(prompts), 1)
    return math.ceil(mean), True


def detect_gpus() -> tuple[float, int] | None:
    """(memory of the first NVIDIA GPU in GiB, how many there are) from nvidia-smi; None without it."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    sizes = [float(line) for line in done.stdout.split() if line.strip().replace(".", "", 1).isdigit()]
    if done.returncode != 0 or not sizes:
        return None
    return sizes[0] / 1024, len(sizes)


def gpu_for(project: Any, has_gpu: bool) -> tuple[Any, int, list[str]]:
    """(the GPU to size for, or None for the CPU's KV cache; how many GPUs the host has; notes)."""
    from vllm_repo.estimate import resolve_gpu

    notes = []
    num_gpus = project.num_gpus or 1
    spec = project.gpu_spec
    if spec is None and has_gpu:
        found = detect_gpus()
        if found is None:
            raise TuneError("this host has an NVIDIA GPU that nvidia-smi does not describe", hint="give --gpu NAME")
        spec, num_gpus = found[0], project.num_gpus or found[1]
    if spec is None:
        notes.append("no NVIDIA GPU: candidates are sized against the CPU's KV cache only")
        return None, 1, notes
    gpu = resolve_gpu(spec)
    if not has_gpu:
        notes.append(f"sized for {gpu.name} (--gpu); the engine runs on this host's CPU, so the figures are the CPU's")
    return gpu, num_gpus, notes


@dataclasses.dataclass
class Sizer:
    """Sizes candidates with the estimator; remembers each verdict."""

    original: dict[str, Any]
    version_dir: Path
    vllm_version: str | None
    gpu: Any  # a Gpu, or None for the CPU's KV cache
    cpu_kv_bytes: int | None
    concurrency: int | None
    tokens_per_request: int
    facts: Any = None
    verdicts: dict[tuple, Sizing] = dataclasses.field(default_factory=dict)

    @property
    def where(self) -> str:
        if self.gpu is None:
            return f"in the CPU's KV cache ({(self.cpu_kv_bytes or 0) / 2**30:g} GiB)"
        return f"on {self.gpu.name}"

    def size(self, candidate: Candidate) -> Sizing:
        key = candidate.key()
        if key not in self.verdicts:
            self.verdicts[key] = self._size(candidate)
        return self.verdicts[key]

    def _size(self, candidate: Candidate) -> Sizing:
        from vllm_repo.estimate import EstimateError, estimate_model, load_model_facts
        from vllm_repo.estimate.gpus import custom_gpu

        args = candidate_args(self.original, candidate)
        settings = read_engine_settings(args)
        refused = refused_by_vllm(settings, args)
        if refused:
            return Sizing(refused)
        model = settings.model or ""
        if self.facts is None:
            try:
                self.facts = load_model_facts(model, offline=True, revision=settings.revision, base=self.version_dir)
            except Exception as exc:
                raise TuneError(
                    f"cannot size {model}: {exc}",
                    hint="tune reads the model's config.json offline: a local model directory or the Hugging Face "
                    "cache",
                ) from None
        gpu = self.gpu
        if gpu is None:
            gpu = custom_gpu(CPU_NOMINAL_GPU_GIB)
            if settings.kv_cache_memory_bytes is None:
                settings = settings.replace(kv_cache_memory_bytes=self.cpu_kv_bytes)
        try:
            est = estimate_model(
                model,
                gpu,
                num_gpus=settings.parallel_size,
                vllm_version=self.vllm_version,
                facts=self.facts,
                settings=settings,
            )
        except EstimateError as exc:
            return Sizing(f"vLLM would refuse these settings: {exc.message}")
        concurrency = self.concurrency if self.concurrency is not None else est.max_num_seqs
        per_engine = math.ceil(concurrency / max(candidate.instances, 1))
        return judge(
            # Without a GPU only the KV cache is sized: fits is whether it holds one request at max_model_len.
            fits=est.fits if self.gpu is not None else (None if est.fits else False),
            error=est.error,
            kv_cache_tokens=est.kv_cache_tokens,
            max_num_seqs=est.max_num_seqs,
            max_num_batched_tokens=est.max_num_batched_tokens,
            block_size=est.block_size,
            concurrency=per_engine,
            tokens_per_request=self.tokens_per_request,
            where=self.where,
        )


def refused_by_vllm(settings: Any, args: dict[str, Any]) -> str | None:
    """Combinations vLLM's scheduler refuses outright, whatever the memory."""
    seqs, tokens = settings.max_num_seqs, settings.max_num_batched_tokens
    if seqs is not None and tokens is not None and tokens < seqs:
        return f"vLLM refuses max_num_batched_tokens ({tokens}) smaller than max_num_seqs ({seqs})"
    chunked_off = args.get(CHUNKED_PREFILL) is False
    if chunked_off and tokens is not None and settings.max_model_len is not None and tokens < settings.max_model_len:
        return (
            f"vLLM refuses max_num_batched_tokens ({tokens}) smaller than max_model_len ({settings.max_model_len}) "
            "without chunked prefill"
        )
    return None


def make_axes(
    spec: TuneSpec, original: dict[str, Any], sizer: Sizer, schema_keys: set[str], release: Any, num_gpus: int
) -> tuple[Axes, list[str]]:
    """The values and switches to try, and notes on those left out."""
    notes: list[str] = []
    settings = read_engine_settings(original)
    concurrency = sizer.concurrency or 256
    seqs = sorted(set(spec.max_num_seqs or default_seqs(concurrency)))
    tokens = sorted(set(spec.max_num_batched_tokens or default_tokens(seqs)))
    wanted = SWITCHES if spec.switches is None else tuple(spec.switches)
    switches: list[Switch] = []
    for name in wanted:
        if name in (PREFIX_CACHING, CHUNKED_PREFILL):
            value = original.get(name)
            if isinstance(value, str) and value.strip().lower() in ("true", "false"):
                value = value.strip().lower() == "true"  # quoted, as Triton's own backend's files often are
            if not isinstance(value, bool):
                value = default_switch(name, release, settings.max_model_len or 0)
            switches.append(Switch(name, functools.partial(_constant, not value)))
        else:
            key, why = graph_switch(
                schema_keys,
                bool(settings.enforce_eager),
                next((original[k] for k in GRAPH_KEYS if k in original), None),
            )
            if key is None:
                notes.append(f"CUDA-graph capture size not tried: {why}")
                continue

            def graph_value(best: Candidate, key: str = key) -> Any:
                seqs_now = best.settings.get("max_num_seqs") or sizer.size(best).max_num_seqs or 256
                size = capture_size(seqs_now)
                return [size] if key == "cuda_graph_sizes" else size

            switches.append(Switch(key, graph_value))
    heads = sizer.facts.arch.num_heads if sizer.facts is not None else 1
    return Axes(seqs, tokens, switches, layouts(num_gpus, settings.tp, heads)), notes


def _constant(value: Any, best: Candidate) -> Any:
    return value


def default_switch(name: str, release: Any, max_model_len: int) -> bool:
    """The switch as vLLM sets it when model.json leaves it out."""
    if name == CHUNKED_PREFILL:
        return bool(release.chunked_prefill(max_model_len, None))
    return not release.v0_engine  # prefix caching: on by default from the V1 engine
