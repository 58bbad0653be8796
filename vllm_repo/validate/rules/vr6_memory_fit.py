"""VR6xx: will vLLM start? The memory estimator on the model's own config, when a GPU is known
(`--gpu`, or `gpu` in [tool.vllm-repo] of pyproject.toml / .vllm-repo.toml) and the config is reachable offline."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from vllm_repo import hf
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.errors import UsageError
from vllm_repo.repository import ModelDirectory, ModelRepository, placement
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.validate.rules.common import count_text, engine_args_objects, vllm_engine_args
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule

if TYPE_CHECKING:
    from vllm_repo.estimate import MemoryEstimate
    from vllm_repo.estimate.gpus import Gpu
    from vllm_repo.estimate.packing import Footprint
    from vllm_repo.releases.memory_budget import Release


@rule("VR601", "does-not-fit", Severity.ERROR)
def does_not_fit(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """The model can't start on the configured GPU: weights, activations and CUDA graphs leave too little KV cache.

    With a GPU named (--gpu, or gpu in [tool.vllm-repo]) and the model's config.json readable offline (as for VR4xx),
    validate estimates what vLLM needs at startup: the weights, the activations of its profiling run, CUDA graphs and
    KV cache for at least one max_model_len sequence. With num-gpus set, it also reports engines that need more GPUs.
    Run the example from its root with --gpu L4: the 14B model's bfloat16 weights alone exceed the L4's 24 GB.

    Example::

        # model_repository/llm/config.pbtxt
        backend: "vllm"
        # model_repository/llm/1/model.json
        {"model": "models/Qwen2.5-14B-Instruct"}
        # models/Qwen2.5-14B-Instruct/config.json
        {
          "architectures": ["Qwen2ForCausalLM"],
          "model_type": "qwen2",
          "hidden_size": 5120,
          "intermediate_size": 13824,
          "num_attention_heads": 40,
          "num_key_value_heads": 8,
          "num_hidden_layers": 48,
          "vocab_size": 152064,
          "max_position_embeddings": 32768,
          "tie_word_embeddings": false,
          "torch_dtype": "bfloat16"
        }
    """
    if ctx.gpu is None:
        return
    # The estimator is imported only here: validate without a GPU never pays for it.
    from vllm_repo.estimate import estimate_for_engine_args
    from vllm_repo.estimate.pack_advice import packing_advice
    from vllm_repo.estimate.packing import fraction_room

    for _, doc in vllm_engine_args(model):
        if not doc.ok or not isinstance(doc.data, dict):
            continue
        parallel = read_engine_settings(doc.data).parallel_size
        if ctx.num_gpus is not None and parallel > ctx.num_gpus:
            gpus = count_text(parallel)
            yield Finding(
                doc.path,
                f"tensor_parallel_size x pipeline_parallel_size = {gpus} needs {gpus} "
                f"GPUs; {ctx.num_gpus} are configured",
                doc.position_of("tensor_parallel_size"),
                hint="lower tensor_parallel_size, or set num-gpus in [tool.vllm-repo]",
            )
            continue
        # What the host and the other engines on its GPUs leave: the recommendations stay within both.
        taken, others = _taken_by_others(model, doc.data, ctx)
        try:
            est = estimate_for_engine_args(
                doc.data,
                ctx.gpu,
                num_gpus=ctx.num_gpus,
                vllm_version=ctx.schema.vllm_version,
                offline=True,
                base=model.path,
                max_utilization=fraction_room(taken),
            )
        except (UsageError, ArithmeticError):  # ArithmeticError: numbers beyond float range
            continue  # settings vLLM rejects outright (EstimateError) are the engine-args rules' findings
        if est is None or est.fits:
            continue
        if est.model_max_model_len is not None and est.max_model_len > est.model_max_model_len:
            continue  # a context longer than the model's own is VR401's finding, not a memory one
        recommendations = [r for r in est.recommendations if not (others and r.setting == "tensor_parallel_size")]
        hint = "; ".join(f"{r.setting}={r.value} ({r.reason})" for r in recommendations[:3]) or None
        if others and hint is None:
            advice = packing_advice(model.path.parent, ctx.gpu, ctx.num_gpus or 1, ctx.schema.vllm_version)
            hint = f"the other engines on its GPU ({others}) leave no share it starts in; {advice}"
        # At the setting the first recommendation changes, where the file has it.
        keys = [r.setting for r in recommendations[:1]] + ["max_model_len", "gpu_memory_utilization", "model"]
        where = next((doc.position_of(k) for k in keys if doc.position_of(k) is not None), None)
        yield Finding(
            doc.path, f"on {est.gpu} this model won't start: {_split_text(est)}. vLLM: {est.error}", where, hint=hint
        )


def _split_text(est: MemoryEstimate) -> str:
    """What takes the memory, against what the engine is given: no part printed as larger than its whole."""
    from vllm_repo.estimate.units import GiB, size_text

    terms = f"weights {size_text(est.weights_gib * GiB)}, activations {size_text(est.activation_gib * GiB)}"
    if est.cudagraph_gib:
        terms += f", CUDA graphs {size_text(est.cudagraph_gib * GiB)}"
    if est.notes and any("kv_cache_memory_bytes" in note for note in est.notes):
        return f"{terms}, and kv_cache_memory_bytes gives the KV cache {size_text(est.kv_cache_gib * GiB)}"
    budget = (
        f"the {size_text(est.requested_gib * GiB)} budget (gpu_memory_utilization {est.gpu_memory_utilization:g} of "
        f"{size_text(est.gpu_total_gib * GiB)})"
    )
    if est.kv_cache_gib <= 0:
        used = (est.weights_gib + est.activation_gib + est.non_torch_gib + est.cudagraph_gib) * GiB
        return (
            f"{terms} and non-torch memory take {size_text(used)}, more than {budget}: nothing is left for the KV cache"
        )
    return f"{terms} leave {size_text(est.kv_cache_gib * GiB)} of {budget} for the KV cache"


def _taken_by_others(model: ModelDirectory, engine_args: dict, ctx: CheckContext) -> tuple[float, str]:
    """The share of the fullest of the model's GPUs the repository's other engines claim, and who they are
    ("chat 0.6 + coder 0.3"; empty when none share its GPUs)."""
    from vllm_repo.repository import open_repository

    settings = read_engine_settings(engine_args)
    gpus = placement.engine_gpus(model, settings) or range(min(ctx.num_gpus or settings.parallel_size, 64))
    left, on_it = placement.fraction_left(
        open_repository(model.path.parent), gpus, ctx.schema.default_gpu_memory_utilization, without=model.name
    )
    return 1 - left, " + ".join(f"{e.model.name} {e.fraction:g}" for e in on_it)


@rule("VR602", "memory-check-skipped", Severity.INFO)
def memory_check_skipped(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A GPU is named but the model's config.json can't be read offline, so the memory check did not run.

    validate never downloads: the memory check (VR601) needs the config in a local model directory or in the local
    Hugging Face cache. Without this note a clean report would read as "fits". Run the example with --gpu L4.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "example-org/never-downloaded-7b"}
    """
    if ctx.gpu is None:
        return
    from vllm_repo.estimate import ArchitectureError, ModelFactsError, ModelNotAvailableOffline, load_model_facts

    for doc in engine_args_objects(model):
        settings = read_engine_settings(doc.data)
        if not settings.model or not settings.model.strip():
            continue  # VR306's finding
        try:
            facts = load_model_facts(settings.model, offline=True, revision=settings.revision, base=model.path)
            facts.arch.check_decoder_shape()
        except ArchitectureError as exc:
            yield Finding(
                doc.path,
                f"the memory check on {ctx.gpu.name} did not run: the estimator can't size this model ({exc.message})",
                doc.position_of("model"),
            )
        except ModelFactsError as exc:
            # validate never downloads, whatever HF_HUB_OFFLINE says: a config it lacks is one not in the cache.
            why = (
                f"{settings.model}'s config.json is not in the local Hugging Face cache, and validate reads no network"
                if isinstance(exc, ModelNotAvailableOffline)
                else exc.message
            )
            yield Finding(
                doc.path,
                f"the memory check on {ctx.gpu.name} did not run: {why}",
                doc.position_of("model"),
                hint=f"fetch the config once (`hf download {settings.model} config.json`), or point "
                '"model" at a local directory'
                if hf.is_repo_id(settings.model)
                else None,
            )


@rule("VR603", "shared-gpu-does-not-fit", Severity.ERROR, scope="repository")
def shared_gpu_does_not_fit(repo: ModelRepository, ctx: CheckContext) -> Iterator[Finding]:
    """Engines sharing a GPU, at least one with an absolute KV cache (kv_cache_memory_bytes), whose whole footprints
    add up to more than the GPU's memory.

    An engine with kv_cache_memory_bytes allocates that KV cache whatever else is on the GPU, on top of its weights,
    activation peak, CUDA graphs, non-torch memory and CUDA context; an engine with a fraction only takes that share of
    the GPU and its context. With a GPU named, validate adds up every engine placed on each GPU (as VR504 reads the
    placement) and reports the GPUs where the sum exceeds its memory: the last engine to load runs out of memory.
    `vllm-repo plan REPO --gpu GPU --num-gpus N --pack all --write` sizes the KV caches of engines sharing a GPU
    together. Run the example with --gpu L4.

    Example::

        # chat/config.pbtxt
        backend: "vllm"
        instance_group [ { kind: KIND_GPU, gpus: [ 0 ] } ]
        # chat/1/model.json
        {"model": "models/qwen-1.5b", "gpu_memory_utilization": 0.45, "kv_cache_memory_bytes": 8000000000}
        # coder/config.pbtxt
        backend: "vllm"
        instance_group [ { kind: KIND_GPU, gpus: [ 0 ] } ]
        # coder/1/model.json
        {"model": "models/qwen-1.5b", "gpu_memory_utilization": 0.45, "kv_cache_memory_bytes": 8000000000}
        # models/qwen-1.5b/config.json
        {
          "architectures": ["Qwen2ForCausalLM"],
          "model_type": "qwen2",
          "hidden_size": 1536,
          "intermediate_size": 8960,
          "num_attention_heads": 12,
          "num_key_value_heads": 2,
          "num_hidden_layers": 28,
          "vocab_size": 151936,
          "max_position_embeddings": 32768,
          "tie_word_embeddings": true,
          "torch_dtype": "bfloat16"
        }
    """
    if ctx.gpu is None:
        return
    placed = placement.all_instances(repo.models, ctx.schema.default_gpu_memory_utilization)
    if len(placed) < 2 or not any(i.settings.kv_cache_memory_bytes for i in placed):
        return  # fractions only: VR504 adds them up
    from vllm_repo.releases.memory_budget import resolve_release

    release, _ = resolve_release(ctx.schema.vllm_version)
    footprints = _Footprints(ctx.gpu, release)
    gpu_ids = set().union(*(i.gpus for i in placed if i.gpus)) | {0}
    reported: set[tuple[str, ...]] = set()
    for gpu in sorted(gpu_ids):
        on_gpu = placement.sharing(placed, gpu)
        names = tuple(sorted(f"{i.model.name}/{i.group}/{i.index}" for i in on_gpu))
        if len(on_gpu) < 2 or names in reported or not any(repo.is_selected(i.model) for i in on_gpu):
            continue
        sized = [(i, footprints.of(i)) for i in on_gpu]
        known = [(i, f) for i, f in sized if f is not None]
        if sum(f.total_bytes for _, f in known) <= ctx.gpu.total_bytes or not any(f.absolute for _, f in known):
            continue
        reported.add(names)
        yield _shared_gpu_finding(repo, ctx, gpu, sized, gpus=ctx.num_gpus or max(gpu_ids) + 1)


class _Footprints:
    """Each engine's footprint on a GPU, sized once (None where it can't be sized)."""

    def __init__(self, gpu: Gpu, release: Release) -> None:
        self.gpu, self.release = gpu, release
        self._sized: dict[tuple[str, int, int], Footprint | None] = {}

    def of(self, instance: placement.Instance) -> Footprint | None:
        key = (instance.model.name, instance.group, instance.index)
        if key not in self._sized:
            self._sized[key] = self._size(instance)
        return self._sized[key]

    def _size(self, instance: placement.Instance) -> Footprint | None:
        from vllm_repo.estimate import ArchitectureError, ModelFactsError, load_model_facts
        from vllm_repo.estimate.packing import footprint

        settings = instance.settings
        try:
            facts = load_model_facts(
                settings.model or "", offline=True, revision=settings.revision, base=instance.model.path
            )
            facts.arch.check_decoder_shape()
            return footprint(settings, facts, self.gpu, self.release)
        except (ModelFactsError, ArchitectureError, UsageError, ArithmeticError):
            return None  # VR602 says why it can't be sized; VR601 what vLLM refuses


def _shared_gpu_finding(
    repo: ModelRepository,
    ctx: CheckContext,
    gpu: int,
    sized: list[tuple[placement.Instance, Footprint | None]],
    *,
    gpus: int,
) -> Finding:
    """VR603 on the first selected engine of those sharing ``gpu``: the footprints that add up to too much."""
    from vllm_repo.estimate.pack_advice import packing_advice

    assert ctx.gpu is not None  # the rule runs with a GPU named
    known = [(i, f) for i, f in sized if f is not None]
    total = sum(f.total_bytes for _, f in known)
    first = next(i for i, _ in sized if repo.is_selected(i.model))
    parts = ", ".join(
        f"{i.model.name} {f.total_bytes / 2**30:.1f} (KV {f.kv_bytes / 2**30:.1f}"
        f"{' set' if f.absolute else ' from its fraction'})"
        for i, f in known
    )
    unsized = [i.model.name for i, f in sized if f is None]
    advice = packing_advice(repo.root, ctx.gpu, gpus, ctx.schema.vllm_version)
    return Finding(
        first.engine_args.path,
        f"GPU {gpu} is shared by {len(sized)} engines whose footprints add up to {total / 2**30:.1f} GiB, more "
        f"than the {ctx.gpu.name}'s {ctx.gpu.total_bytes / 2**30:.1f} GiB (GiB each: {parts})"
        + (f"; not counted, unsized: {', '.join(unsized)}" if unsized else "")
        + ": the last one to load runs out of memory",
        first.engine_args.position_of("kv_cache_memory_bytes") or first.engine_args.position_of("model"),
        hint=f"{advice}; or lower kv_cache_memory_bytes, or place the models on different GPUs",
    )
