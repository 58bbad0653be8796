"""VR5xx, GPU placement: which GPUs each model instance's engine takes (config.pbtxt's instance_group and
GPU_DEVICE_IDS against model.json's parallel sizes), across the models that share them and the GPUs configured."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import ModelDirectory, ModelRepository, placement
from vllm_repo.repository.documents import PbtxtDocument, Position
from vllm_repo.repository.engine_settings import EngineSettings, read_engine_settings
from vllm_repo.validate.rules.common import count_text, engine_args_and_config
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule


@rule("VR503", "kind-gpu-parallel", Severity.ERROR)
def kind_gpu_parallel(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """KIND_GPU with tensor/pipeline parallelism: each instance is pinned to one GPU, so vLLM can't use more.

    Triton gives each KIND_GPU instance one GPU, so an engine that needs tensor_parallel_size x
    pipeline_parallel_size GPUs can't be placed, and vllm-repo's backend refuses to load it. With KIND_MODEL, vLLM
    places the model across the GPUs itself.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        instance_group [ { count: 1 kind: KIND_GPU } ]
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel_size": 2}
    """
    both = engine_args_and_config(model)
    if both is None:
        return
    _, data, doc_cfg = both
    size = read_engine_settings(data).parallel_size
    if size > 1 and any(kind == "KIND_GPU" for _, kind in _group_kinds(doc_cfg)):
        yield Finding(
            doc_cfg.path,
            f"instance_group is KIND_GPU but model.json asks for {count_text(size)} GPUs "
            "(tensor_parallel_size x pipeline_parallel_size); a KIND_GPU instance sees one GPU",
            doc_cfg.field_position("KIND_GPU") or doc_cfg.field_position("kind"),
            hint="use kind: KIND_MODEL so vLLM places the model across GPUs",
        )


def _device_ids_position(cfg: PbtxtDocument) -> Position | None:
    """Where config.pbtxt names GPU_DEVICE_IDS."""
    key = re.escape(placement.GPU_DEVICE_IDS)
    return cfg.find(rf"[\"']?\bkey\b[\"']?\s*:\s*[\"']{key}[\"']") or cfg.find(rf"[\"']{key}[\"']")


def _instance_group_position(cfg: PbtxtDocument, field: str = "count") -> Position | None:
    return cfg.field_position(field) or cfg.field_position("instance_group")


def _engines_text(on_gpu: list[placement.Instance]) -> str:
    """ "chat 0.6 + coder 0.5 x2": each model's gpu_memory_utilization, with how many of its instances share."""
    counts = Counter(i.model.name for i in on_gpu)
    fractions = {i.model.name: i.fraction for i in on_gpu}
    return " + ".join(f"{name} {fractions[name]:g}" + (f" x{n}" if n > 1 else "") for name, n in counts.items())


# How vLLM refuses the engines that don't fit: its start-up check, for one that starts after the others took their
# share; for engines that start together and pass it, the KV cache's sizing.
_LATER_ONES_FAIL = (
    'the later ones fail at start ("Free memory on device ... on startup is less than desired GPU memory '
    'utilization"), or, started together, with "No available memory for the cache blocks"'
)


@rule("VR504", "gpu-oversubscribed", Severity.ERROR, scope="repository")
def gpu_oversubscribed(repo: ModelRepository, ctx: CheckContext) -> Iterator[Finding]:
    """Engines sharing a GPU whose gpu_memory_utilization adds up to more than 1.0.

    gpu_memory_utilization is the share of a GPU's total memory one engine may use, and at startup vLLM requires that
    much memory to be free; engines on the same GPU whose shares add up to more than 1.0 can't all start. Every model
    instance is an engine: models without instance_group get an instance on every GPU, so the two models below share
    GPU 0, and two instances of one model share a GPU under KIND_GPU with count: 2, or KIND_MODEL whose
    GPU_DEVICE_IDS gives every instance the same group.

    Example::

        # chat/config.pbtxt
        backend: "vllm"
        # chat/1/model.json
        {"model": "Qwen/Qwen2.5-1.5B-Instruct", "gpu_memory_utilization": 0.6}
        # coder/config.pbtxt
        backend: "vllm"
        # coder/1/model.json
        {"model": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "gpu_memory_utilization": 0.6}
    """
    placed = placement.all_instances(repo.models, ctx.schema.default_gpu_memory_utilization)
    if len(placed) < 2:
        return
    # Instances on every GPU (gpus None) are on each listed one too; GPU 0 stands for "any GPU" when none is listed.
    gpu_ids = set().union(*(i.gpus for i in placed if i.gpus)) | {0}
    reported: set[tuple[tuple[str, int], ...]] = set()
    for gpu in sorted(gpu_ids):
        on_gpu = placement.sharing(placed, gpu)
        total = sum(i.fraction for i in on_gpu)
        counts = Counter(i.model.name for i in on_gpu)
        key = tuple(sorted(counts.items()))
        if len(on_gpu) < 2 or total <= 1.0 + 1e-9 or key in reported:
            continue
        models = {i.model.name: i for i in on_gpu}
        if not any(repo.is_selected(i.model) for i in models.values()):
            continue
        reported.add(key)
        parts = _engines_text(on_gpu)
        if len(models) == 1:
            yield from _instances_oversubscribed(gpu, on_gpu, total)
            continue
        # Once per GPU, at the first model checked that shares it: the finding names every engine, and five copies
        # of one message (one per model) said nothing more.
        instance = next(i for i in models.values() if repo.is_selected(i.model))
        doc = instance.engine_args
        yield Finding(
            doc.path,
            f"GPU {gpu} is shared by {len(on_gpu)} engines ({parts}) whose gpu_memory_utilization "
            f"adds up to {total:.2f}; {_LATER_ONES_FAIL}",
            doc.position_of("gpu_memory_utilization"),
            hint="lower the fractions so they sum to at most 1.0 (leave room for CUDA contexts), "
            "or pin models to different GPUs with KIND_GPU gpus: [...] or GPU_DEVICE_IDS",
        )


def _instances_oversubscribed(gpu: int, on_gpu: list[placement.Instance], total: float) -> Iterator[Finding]:
    """VR504 for one model whose own instances share a GPU: the cause is its instance_group (or GPU_DEVICE_IDS)."""
    first = on_gpu[0]
    cfg = first.model.config
    # Two instances of one model: only an instance_group starts more than one, so config.pbtxt is there and parsed.
    assert cfg is not None
    ids = placement.device_ids(first.model)
    if first.kind == "KIND_MODEL" and ids is not None:
        why = f'GPU_DEVICE_IDS "{ids.text}" puts them on the same GPUs'
        where = _device_ids_position(cfg)
    else:
        why = f"instance_group starts {len(on_gpu)} {first.kind} instances on it"
        where = _instance_group_position(cfg)
    each = math.floor(100 / len(on_gpu)) / 100
    size = first.settings.parallel_size
    pin = f'KIND_MODEL with one GPU_DEVICE_IDS group per instance, e.g. "{_example_groups(size, len(on_gpu))}"'
    if size == 1:
        pin += f", or KIND_GPU gpus: [{', '.join(str(k) for k in range(min(len(on_gpu), 4)))}] with count: 1"
    yield Finding(
        cfg.path,
        f"GPU {gpu} runs {len(on_gpu)} instances of {first.model.name}, each an engine claiming "
        f"gpu_memory_utilization {first.fraction:g} of it ({total:.2f} in all): {why}; {_LATER_ONES_FAIL}",
        where,
        hint=f"give each instance its own GPUs ({pin}), or lower gpu_memory_utilization to {each:g} or less",
    )


def spans_hosts(settings: EngineSettings) -> bool:
    """An engine vLLM runs across hosts: on a Ray cluster, or the multiprocessing executor's nnodes > 1."""
    return settings.uses_ray or settings.hosts > 1


@rule("VR506", "gpu-out-of-range", Severity.ERROR)
def gpu_out_of_range(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """Model instances placed on GPUs that don't exist, with num-gpus configured.

    With num-gpus set (--num-gpus, or num-gpus in [tool.vllm-repo]), the GPUs are 0 to num-gpus - 1. Triton refuses
    to load a model whose KIND_GPU instance_group lists another id, and an engine given other ids through
    GPU_DEVICE_IDS, or by KIND_MODEL's count (instance k runs on GPUs [k x size, (k+1) x size), size being
    tensor_parallel_size x pipeline_parallel_size), finds no such GPU. In the example two GPUs are configured, and
    two instances of a 2-GPU engine need GPUs 0 to 3.

    Example::

        # .vllm-repo.toml
        num-gpus = 2
        # model_repository/llm/config.pbtxt
        backend: "vllm"
        instance_group [ { count: 2 kind: KIND_MODEL } ]
        # model_repository/llm/1/model.json
        {"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel_size": 2}
    """
    if ctx.num_gpus is None:
        return
    both = engine_args_and_config(model)
    if both is None:
        return
    doc, data, cfg = both
    settings = read_engine_settings(data)
    size = settings.parallel_size
    gpus_text = f"GPUs 0 to {ctx.num_gpus - 1}" if ctx.num_gpus > 1 else "GPU 0"
    configured = f"{count_text(ctx.num_gpus)} GPUs are configured ({gpus_text})"
    ids = placement.device_ids(model)
    beyond: dict[str, set[int]] = {}
    instances_beyond: dict[str, set[int]] = {}
    for gpus, _, index, kind in placement.placements(model, settings):
        missing = {g for g in gpus or () if g >= ctx.num_gpus}
        if not missing:
            continue
        source = "gpus" if kind == "KIND_GPU" else "ids" if kind == "KIND_MODEL" and ids is not None else "count"
        beyond.setdefault(source, set()).update(missing)
        instances_beyond.setdefault(source, set()).add(index)
    if "gpus" in beyond:
        yield Finding(
            cfg.path,
            f"instance_group lists {_ids_text(beyond['gpus'])}, but {configured}; Triton refuses to load the model",
            _instance_group_position(cfg, "gpus"),
            hint=f"list GPUs from 0 to {ctx.num_gpus - 1} in gpus: [...], or set num-gpus to the GPUs the host has",
        )
    if "ids" in beyond and ids is not None:  # "ids" is where GPU_DEVICE_IDS placed them
        yield Finding(
            cfg.path,
            f'GPU_DEVICE_IDS "{ids.text}" names {_ids_text(beyond["ids"])}, but {configured}; the engine of '
            "that instance finds no such GPU",
            _device_ids_position(cfg),
            hint=f"use GPU ids from 0 to {ctx.num_gpus - 1}, one group of {count_text(size)} per instance",
        )
    if "count" in beyond:
        if instances_beyond["count"] == {0} and size > ctx.num_gpus:
            if ctx.gpu is not None or spans_hosts(settings):
                return  # VR601 says so with the memory check; an engine across hosts is VR509's
            yield Finding(
                doc.path,
                f"tensor_parallel_size x pipeline_parallel_size = {count_text(size)} needs {count_text(size)} GPUs, "
                f"but {configured}",
                doc.position_of("tensor_parallel_size") or doc.position_of("pipeline_parallel_size"),
                hint=f"lower tensor_parallel_size so the engine fits on {count_text(ctx.num_gpus)} GPUs, set "
                'num-gpus to the GPUs the host has, or span hosts: "distributed_executor_backend": "ray" (a Ray '
                'cluster with the GPUs) or "nnodes" with the multiprocessing executor',
            )
            return
        instances = max(index for gpus, _, index, kind in placement.placements(model, settings) if kind == "KIND_MODEL")
        fit = max(ctx.num_gpus // size, 1)
        yield Finding(
            cfg.path,
            f"instance_group starts {count_text(instances + 1)} KIND_MODEL instances of {count_text(size)} GPUs "
            f"each (instance k on GPUs from k x {size}), {count_text((instances + 1) * size)} GPUs in all, but "
            f"{configured}",
            _instance_group_position(cfg),
            hint=f"use count: {fit} (each instance takes {count_text(size)} GPUs), or lower tensor_parallel_size",
        )


def _ids_text(ids: set[int]) -> str:
    """ "GPU 8", "GPUs 8, 9", "GPUs 8, 9, 10, 11 and 4 more"."""
    listed = sorted(ids)
    text = ", ".join(str(i) for i in listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
    return f"GPU{'s' if len(listed) > 1 else ''} {text}"


@rule("VR507", "parallel-size-gpus", Severity.ERROR)
def parallel_size_gpus(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """tensor_parallel_size x pipeline_parallel_size that doesn't match the GPUs given (GPU_DEVICE_IDS, num-gpus).

    The backend runs each KIND_MODEL instance on its GPU_DEVICE_IDS group and refuses to load the model when a
    group's size differs from tensor_parallel_size x pipeline_parallel_size, or when "0,1;2,3"-style groups are fewer
    than the instances. Without GPU_DEVICE_IDS and with num-gpus set, a size that does not divide the GPUs leaves
    some idle and can't be repeated across them (a warning).

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        instance_group [ { count: 1 kind: KIND_MODEL } ]
        parameters { key: "GPU_DEVICE_IDS" value: { string_value: "0,1,2" } }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel_size": 2}
    """
    both = engine_args_and_config(model)
    if both is None:
        return
    doc, data, cfg = both
    size = read_engine_settings(data).parallel_size
    kinds = _group_kinds(cfg)
    model_counts = [max(g.count, 1) for g, kind in kinds if kind == "KIND_MODEL"]
    ids = placement.device_ids(model)
    if ids is not None and ids.groups and model_counts:
        wrong = [g for g in ids.groups if len(g) != size]
        if wrong:
            yield Finding(
                cfg.path,
                f'GPU_DEVICE_IDS group "{",".join(map(str, wrong[0]))}" lists {count_text(len(wrong[0]))} GPUs, but '
                f"model.json needs {count_text(size)} (tensor_parallel_size x pipeline_parallel_size); the backend "
                "refuses to load the model",
                _device_ids_position(cfg),
                hint=f'give each group {count_text(size)} GPU ids (e.g. "{_example_groups(size, len(ids.groups))}"),'
                " or change tensor_parallel_size",
            )
        instances = max(model_counts)
        if len(ids.groups) > 1 and len(ids.groups) < instances:
            yield Finding(
                cfg.path,
                f'GPU_DEVICE_IDS "{ids.text}" has {count_text(len(ids.groups))} groups for {count_text(instances)} '
                "instances; the backend refuses to load the instances without a group",
                _device_ids_position(cfg),
                hint=f'give one group per instance (e.g. "{_example_groups(size, instances)}"), or lower count to '
                f"{len(ids.groups)}",
            )
        return
    takes_first_gpus = {"KIND_MODEL", "KIND_AUTO", "default"} & {kind for _, kind in kinds} or not kinds
    if ctx.num_gpus is None or size > ctx.num_gpus or ctx.num_gpus % size == 0 or not takes_first_gpus:
        return  # size > num_gpus: VR506 (or VR601)
    divisors = [str(d) for d in range(1, ctx.num_gpus + 1) if ctx.num_gpus % d == 0]
    yield Finding(
        doc.path,
        f"tensor_parallel_size x pipeline_parallel_size = {count_text(size)} does not divide the "
        f"{count_text(ctx.num_gpus)} configured GPUs: {count_text(ctx.num_gpus % size)} stay idle, and instances of "
        f"{count_text(size)} GPUs can't cover them",
        doc.position_of("tensor_parallel_size") or doc.position_of("pipeline_parallel_size"),
        severity=Severity.WARNING,
        hint=f"use a size that divides {ctx.num_gpus} ({', '.join(divisors)}; tensor_parallel_size must also divide "
        "the attention heads), or pin this engine with GPU_DEVICE_IDS and give the other GPUs to other models",
    )


def _group_kinds(cfg: PbtxtDocument) -> list[tuple[Any, str]]:
    """Each instance_group (a ModelInstanceGroup message: protobuf's generated classes are untyped) with its kind."""
    from vllm_repo.repository.model_config import model_config_pb2

    names = model_config_pb2().ModelInstanceGroup.Kind
    return [(g, names.Name(g.kind)) for g in cfg.config.instance_group]


def _example_groups(size: int, groups: int) -> str:
    return ";".join(",".join(str(k * size + i) for i in range(size)) for k in range(max(min(groups, 4), 1)))


@rule("VR508", "gpu-device-ids", Severity.ERROR)
def gpu_device_ids(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """GPU_DEVICE_IDS the backend can't use as written: not a list of GPU ids, repeated ids, or groups that overlap.

    The backend reads config.pbtxt's GPU_DEVICE_IDS for KIND_MODEL instances only: "0,1" for every instance, or
    "0,1;2,3" with one group per instance. It refuses a value that is not comma-separated GPU ids, or that repeats a
    GPU or has a negative one within a group. Groups that share a GPU put two engines on it, each claiming
    gpu_memory_utilization of its memory (a warning; VR504 adds the shares up). With KIND_GPU it is ignored.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        instance_group [ { count: 2 kind: KIND_MODEL } ]
        parameters { key: "GPU_DEVICE_IDS" value: { string_value: "cuda:0,cuda:1;cuda:2,cuda:3" } }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-7B-Instruct", "tensor_parallel_size": 2}
    """
    cfg = model.config
    if cfg is None or cfg.config is None or cfg.config.backend != "vllm":
        return
    ids = placement.device_ids(model)
    if ids is None:
        return
    where = _device_ids_position(cfg)
    if ids.groups is None:
        yield Finding(
            cfg.path,
            f'GPU_DEVICE_IDS "{ids.text}" is not a list of GPU ids; the backend refuses to load the model',
            where,
            hint='write comma-separated GPU ids, "0,1", or one group per instance separated by ";": "0,1;2,3"',
        )
        return
    if "KIND_MODEL" not in {kind for _, kind in _group_kinds(cfg)}:
        yield Finding(
            cfg.path,
            "GPU_DEVICE_IDS is set but no instance_group is KIND_MODEL; the backend reads it for KIND_MODEL "
            "instances only",
            where,
            severity=Severity.WARNING,
            hint="use instance_group [ { kind: KIND_MODEL } ], or pin with KIND_GPU gpus: [...] and drop "
            "GPU_DEVICE_IDS",
        )
        return
    for group in ids.groups:
        if any(i < 0 for i in group) or len(set(group)) != len(group):
            yield Finding(
                cfg.path,
                f'GPU_DEVICE_IDS group "{",".join(map(str, group))}" repeats a GPU or has a negative id; the backend '
                "refuses to load the model",
                where,
                hint="list each GPU id once per group",
            )
            return
    seen: dict[int, int] = {}
    for number, group in enumerate(ids.groups):
        shared = sorted(g for g in group if g in seen)
        if shared:
            other = seen[shared[0]]
            yield Finding(
                cfg.path,
                f'GPU_DEVICE_IDS groups {other} and {number} ("{",".join(map(str, ids.groups[other]))}" and '
                f'"{",".join(map(str, group))}") share {_ids_text(set(shared))}: two instances run engines there, '
                "each claiming gpu_memory_utilization of the memory",
                where,
                severity=Severity.WARNING,
                hint=f'give each instance its own GPUs, e.g. "{_example_groups(len(ids.groups[0]), len(ids.groups))}"',
            )
            return
        for gpu in group:
            seen.setdefault(gpu, number)
