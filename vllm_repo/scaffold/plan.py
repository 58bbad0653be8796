"""`vllm-repo plan`: place a repository's vLLM models on one host's GPUs.

Per model it chooses between tensor parallelism and more instances: the smallest tensor_parallel_size at which one
engine starts and the instances it gets hold the concurrency asked for, then the GPUs left over become more
instances (one engine each, on its own GPUs), never two engines on one GPU. The result is config.pbtxt's
instance_group (KIND_GPU with gpus: [...] for one-GPU engines, KIND_MODEL with the backend's GPU_DEVICE_IDS, one
group per instance, for larger ones) and model.json's tensor_parallel_size, which validate's placement rules
(VR504, VR506 to VR508) accept.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.repository import placement

if TYPE_CHECKING:  # the estimator (and pydantic) is imported where plan sizes an engine
    from vllm_repo.estimate import MemoryEstimate
    from vllm_repo.estimate.model_facts import ModelFacts
    from vllm_repo.estimate.packing import PackedGpu
    from vllm_repo.repository.engine_settings import EngineSettings


class PlanError(VllmRepoError):
    pass


# The budgets plan --pack writes for an engine sharing a GPU: sized for that GPU and its neighbours only.
SHARED_BUDGET_KEYS = ("kv_cache_memory_bytes", "gpu_memory_utilization")


@dataclasses.dataclass(frozen=True)
class Option:
    """One engine size for a model: its tensor_parallel_size and what the estimator says one engine gets."""

    tensor_parallel_size: int
    estimate: MemoryEstimate

    @property
    def concurrency(self) -> float:
        """Sequences of max_model_len tokens one engine holds in its KV cache."""
        return self.estimate.max_concurrency


@dataclasses.dataclass
class ModelPlan:
    name: str
    options: list[Option]  # the sizes at which one engine starts, smallest first
    chosen: Option
    instances: int
    gpu_groups: list[tuple[int, ...]] = dataclasses.field(default_factory=list)
    dropped: dict[str, Any] = dataclasses.field(default_factory=dict)  # a shared GPU's budget, not for GPUs of its own

    @property
    def gpus(self) -> int:
        return self.chosen.tensor_parallel_size * self.instances

    def explain(self, concurrency: int) -> list[str]:
        est, tp = self.chosen.estimate, self.chosen.tensor_parallel_size
        groups = ", ".join(",".join(map(str, g)) for g in self.gpu_groups)
        lines = [
            f"{self.name}: {self.instances} instance{'s' if self.instances > 1 else ''} x tensor_parallel_size {tp} "
            f"on GPUs {groups}",
            f"  per GPU: weights {est.weights_gib:.1f} GiB, activations {est.activation_gib:.1f} GiB, CUDA graphs "
            f"{est.cudagraph_gib:.1f} GiB, KV cache {est.kv_cache_gib:.1f} GiB of {est.requested_gib:.1f} GiB "
            f"(gpu_memory_utilization {est.gpu_memory_utilization:g} of {est.gpu_total_gib:.1f} GiB)",
            f"  KV tokens per instance: {est.kv_cache_tokens:,} = {self.chosen.concurrency:.1f} sequences of "
            f"{est.max_model_len:,} tokens; {self.instances * self.chosen.concurrency:.1f} in all "
            f"(asked: {concurrency})",
        ]
        if self.dropped:
            was = ", ".join(f"{k} {v}" for k, v in self.dropped.items())
            lines.append(
                f"  model.json's {was}: a budget for a GPU shared with other engines (plan --pack's), not for GPUs "
                "of its own: removed, vLLM's default share applies"
            )
        larger = [o for o in self.options if tp < o.tensor_parallel_size <= self.gpus]
        if larger:
            alt = larger[-1]
            n = self.gpus // alt.tensor_parallel_size
            lines.append(
                f"  not tensor_parallel_size {alt.tensor_parallel_size} on the same GPUs: {n} engine"
                f"{'s' if n > 1 else ''} holding {n * alt.concurrency:.1f} sequences in all, instead of "
                f"{self.instances} that batch independently, and an all-reduce across GPUs in every step"
            )
        smaller = [o for o in self.options if o.tensor_parallel_size < tp]
        if smaller:
            alt = smaller[-1]
            n = _instances_for(alt, concurrency)
            lines.append(
                f"  not tensor_parallel_size {alt.tensor_parallel_size}: one engine holds {alt.concurrency:.1f} "
                f"sequences, so {concurrency} take {n} instances, {n * alt.tensor_parallel_size} GPUs"
            )
        elif tp > 1:
            lines.append(f"  not a smaller tensor_parallel_size: one engine does not start on fewer than {tp} GPUs")
        return lines


def candidate_sizes(num_heads: int, num_gpus: int) -> list[int]:
    """tensor_parallel_size values to try: powers of two up to num_gpus that divide the attention heads."""
    sizes, size = [], 1
    while size <= num_gpus:
        if num_heads % size == 0:
            sizes.append(size)
        size *= 2
    return sizes


def engine_options(
    engine_args: dict[str, Any], gpu: str | float, num_gpus: int, vllm_version: str | None, base: Path, name: str = ""
) -> list[Option]:
    """The sizes at which one engine of ``engine_args``' model starts on ``gpu``, smallest first."""
    from vllm_repo.estimate import estimate_model

    settings, facts = _settings_and_facts(engine_args, base, name)
    settings = settings.replace(pipeline_parallel_size=None)  # plan spreads engines with tensor parallelism only
    if shared_budget(engine_args):
        settings = settings.replace(kv_cache_memory_bytes=None, gpu_memory_utilization=None)
    model = settings.model or ""  # _settings_and_facts refused a model.json without one

    def fitting(settings: EngineSettings) -> list[Option]:
        options = []
        for size in candidate_sizes(facts.arch.num_heads, num_gpus):
            sized = settings.replace(tensor_parallel_size=size)
            try:
                est = estimate_model(
                    model, gpu, num_gpus=num_gpus, vllm_version=vllm_version, facts=facts, settings=sized
                )
            except UsageError:
                continue
            if est.fits:
                options.append(Option(size, est))
        return options

    options = fitting(settings)
    fraction = settings.gpu_memory_utilization
    if not options and fraction is not None:
        # A small fraction is what init --gpu writes for a GPU other engines share: plan gives each engine GPUs of
        # its own, so it is not what keeps the model from starting here, and lowering max_model_len is no answer.
        alone = fitting(settings.replace(gpu_memory_utilization=None))
        if alone:
            default = alone[0].estimate.gpu_memory_utilization
            raise PlanError(
                f"{name or model} does not start on {num_gpus} GPUs with model.json's gpu_memory_utilization "
                f"{fraction:g}: each engine may take only that fraction of a GPU "
                f"({fraction * alone[0].estimate.gpu_total_gib:.1f} of {alone[0].estimate.gpu_total_gib:.1f} GiB)",
                hint=f"at vLLM's default of {default:g} it starts at tensor_parallel_size "
                f"{alone[0].tensor_parallel_size}: remove gpu_memory_utilization from model.json or raise it (plan "
                "gives each engine GPUs of its own; a fraction meant for a GPU shared with other engines does not "
                "apply)",
            )
    return options


def shared_budget(engine_args: dict[str, Any]) -> dict[str, Any]:
    """The budget of an engine packed onto a shared GPU (kv_cache_memory_bytes, with the gpu_memory_utilization
    beside it), as model.json has it; empty for any other engine. It was sized for that GPU and the engines beside it:
    an engine plan gives GPUs of its own takes vLLM's default share instead."""
    if not engine_args.get("kv_cache_memory_bytes"):
        return {}
    return {key: engine_args[key] for key in SHARED_BUDGET_KEYS if key in engine_args}


def choose(
    plans_input: list[tuple[str, list[Option]]], num_gpus: int, concurrency: int, first_gpu: int = 0
) -> list[ModelPlan]:
    """Give each model the fewest GPUs that hold ``concurrency`` sequences, then the GPUs left as more instances;
    the GPUs are ``first_gpu`` on (those before it are packed)."""
    plans = []
    for name, options in plans_input:
        if not options:
            raise PlanError(
                f"{name} does not start on {num_gpus} GPUs at any tensor_parallel_size",
                hint="lower max_model_len or use a quantized model; `vllm-repo estimate` shows the memory split",
            )
        # Fewest GPUs for the concurrency; at equal GPUs, the smaller engines (more instances).
        best = min(options, key=lambda o: (_gpus_for(o, concurrency), o.tensor_parallel_size))
        plans.append(ModelPlan(name, options, best, _instances_for(best, concurrency)))
    used = sum(p.gpus for p in plans)
    if used > num_gpus:
        needs = ", ".join(f"{p.name} {p.gpus}" for p in plans)
        raise PlanError(
            f"the models need {used} GPUs for {concurrency} concurrent sequences each ({needs}); {num_gpus} "
            f"{'is' if num_gpus == 1 else 'are'} given",
            hint="lower --concurrency or max_model_len, or serve fewer models on this host",
        )
    left = num_gpus - used
    while True:  # the GPUs left become more instances, one model at a time
        grew = False
        for p in plans:
            if p.chosen.tensor_parallel_size <= left:
                p.instances += 1
                left -= p.chosen.tensor_parallel_size
                grew = True
        if not grew:
            break
    start = first_gpu
    for p in plans:
        size = p.chosen.tensor_parallel_size
        p.gpu_groups = [tuple(range(start + k * size, start + (k + 1) * size)) for k in range(p.instances)]
        start += p.gpus
    return plans


def _gpus_for(option: Option, concurrency: int) -> int:
    return option.tensor_parallel_size * _instances_for(option, concurrency)


def _instances_for(option: Option, concurrency: int) -> int:
    return max(math.ceil(concurrency / option.concurrency - 1e-9), 1) if option.concurrency > 0 else 10**9


# ------------------------------------------------------------------------------------------------ writing the files


def _top_level_spans(text: str, field: str) -> list[tuple[int, int]]:
    """Where each top-level ``field: value`` / ``field [ ... ]`` / ``field { ... }`` of a pbtxt text is written."""
    spans, depth, i = [], 0, 0
    pattern = re.compile(rf"\b{re.escape(field)}\b\s*:?\s*")
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = _skip_string(text, i)
            continue
        if ch == "#":
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
            continue
        if depth == 0:
            match = pattern.match(text, i)
            if match and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                end = _value_end(text, match.end())
                spans.append((i, end))
                i = end
                continue
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        i += 1
    return spans


def _skip_string(text: str, i: int) -> int:
    quote, i = text[i], i + 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _value_end(text: str, i: int) -> int:
    if i < len(text) and text[i] in "[{":
        depth = 0
        while i < len(text):
            ch = text[i]
            if ch in "\"'":
                i = _skip_string(text, i)
                continue
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return i
    match = re.compile(r"[^\s\]}]+").match(text, i)
    return match.end() if match else i


def _edited(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with each (start, end, replacement) applied; a field removed (replaced by "") takes its line's end."""
    for start, end, replacement in sorted(edits, reverse=True):
        if not replacement and text[end : end + 1] == "\n":
            end += 1
        text = text[:start] + replacement + text[end:]
    return text


PLACED = "Placed by vllm-repo plan"  # how the comment plan writes above instance_group begins


def _describing_comment_start(text: str, start: int) -> int:
    """Where the comment lines right above ``start`` begin, when they speak of instances (KIND_..., instance); else
    ``start``."""
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip():  # something else on the line before it
        return start
    begin = line_start
    while begin > 0:
        previous = text.rfind("\n", 0, begin - 1) + 1
        line = text[previous : begin - 1].strip()
        if not (line.startswith("#") and ("KIND_" in line or "instance" in line.lower() or PLACED in line)):
            break
        begin = previous
    return begin


def placement_config(text: str, groups: list[tuple[int, ...]], why: str | None = None) -> str:
    """``text`` (a config.pbtxt) with its instance_group and GPU_DEVICE_IDS replaced by ``groups``' placement;
    ``why``, where given, is the comment written above it."""
    from google.protobuf import text_format

    from vllm_repo.repository.model_config import model_config_pb2

    if len(groups[0]) == 1:
        ids = ", ".join(str(g[0]) for g in groups)
        added = (
            f"# {PLACED}{why or f': one engine on each of GPUs {ids}.'}\n"
            f"instance_group [\n  {{\n    count: 1\n    kind: KIND_GPU\n    gpus: [ {ids} ]\n  }}\n]\n"
        )
    else:
        ids = ";".join(",".join(map(str, g)) for g in groups)
        groups_text = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
        added = (
            f"# {PLACED}: {len(groups)} engine(s) of {len(groups[0])} GPUs, on GPUs {groups_text}; "
            f"{placement.GPU_DEVICE_IDS} gives each instance its group.\n"
            f"instance_group [\n  {{\n    count: {len(groups)}\n    kind: KIND_MODEL\n  }}\n]\n"
            f'parameters {{\n  key: "{placement.GPU_DEVICE_IDS}"\n  value: {{ string_value: "{ids}" }}\n}}\n'
        )
    groups_spans = _top_level_spans(text, "instance_group")
    params = _top_level_spans(text, "parameters")
    drop = groups_spans[1:] + [span for span in params if placement.GPU_DEVICE_IDS in text[span[0] : span[1]]]
    removed = [(s, e, "") for s, e in drop]
    if not groups_spans:
        new = _edited(text, removed).rstrip("\n") + "\n\n" + added
    else:
        # Where the old instance_group was, in place of it and of the comment above it that described it (init's
        # "KIND_MODEL lets vLLM choose its device" is not true of a KIND_GPU placement); other comments stay.
        start, end = groups_spans[0]
        new = _edited(text, [(_describing_comment_start(text, start), end, added.rstrip("\n")), *removed])
    check = model_config_pb2().ModelConfig()
    text_format.Parse(new, check)  # what plan writes must parse as Triton's ModelConfig
    return new


def placement_engine_args(
    text: str,
    tensor_parallel_size: int,
    budget: dict[str, int | float] | None = None,
    drop: Collection[str] = (),
) -> str:
    """``text`` (a model.json) with tensor_parallel_size set and pipeline_parallel_size dropped; ``budget``: the
    memory settings of a packed engine (kv_cache_memory_bytes, gpu_memory_utilization) set too; ``drop``: keys
    removed (a shared GPU's budget, for an engine placed on GPUs of its own)."""
    data = json.loads(text)
    wanted = {"tensor_parallel_size": tensor_parallel_size, **(budget or {})}
    removed = {"pipeline_parallel_size", *drop} - set(wanted)
    if all(data.get(k, 1 if k == "tensor_parallel_size" else None) == v for k, v in wanted.items()) and not (
        removed & set(data)
    ):
        return text  # already so: leave the file as it is written
    for key in removed:
        data.pop(key, None)
    data.update(wanted)
    indent = 2 if "\n" in text.strip() else None
    return json.dumps(data, indent=indent) + "\n"


@dataclasses.dataclass
class RepositoryPlan:
    """Where every vLLM model of a repository runs: GPUs of their own (``models``) or packed (``packed``)."""

    models: list[ModelPlan]
    packed: list[PackedGpu]
    absolute: bool  # the packed engines' KV caches are set in bytes (kv_cache_memory_bytes)
    changes: dict[Path, tuple[str, str]]  # path -> (old text, new text)

    def explain(self, concurrency: int) -> list[str]:
        lines = [line for p in self.packed for line in p.explain(self.absolute)]
        if self.packed and not self.absolute:
            lines.append(
                "  this release has no kv_cache_memory_bytes: the fractions give these KV caches only when the "
                "engines load one at a time (launch loads a packed repository so)"
            )
        return lines + [line for p in self.models for line in p.explain(concurrency)]


def plan_repository(
    repo: Path,
    gpu: str | float,
    num_gpus: int,
    concurrency: int,
    vllm_version: str | None = None,
    pack: bool | Collection[str] = False,
    margin_gib: float | None = None,
) -> RepositoryPlan:
    """The plan for every vLLM model of ``repo`` and the files it changes. ``pack``: True packs every model onto
    shared GPUs, a collection of names packs those models; the others get GPUs of their own."""
    from vllm_repo.repository import open_repository

    repository = open_repository(repo)
    texts: dict[str, tuple[Path, str, Path, str, dict[str, Any]]] = {}  # config.pbtxt, model.json, their texts
    for model in repository.models:
        doc = model.checked_engine_args()
        cfg = model.config
        if doc is None or cfg is None or cfg.config is None or not isinstance(doc.data, dict):
            continue
        # Both parsed (a config, a JSON object), so both were read: a document has its text whenever it has data.
        assert cfg.text is not None and doc.text is not None
        texts[model.name] = (cfg.path, cfg.text, doc.path, doc.text, doc.data)
    if not texts:
        raise PlanError(f"{repo} has no vLLM model with a readable config.pbtxt and model.json")
    packing = set(texts) if pack is True else set(pack or ()) & set(texts)
    unknown = set(pack) - set(texts) if not isinstance(pack, bool) else set()
    if unknown:
        raise PlanError(
            f"no vLLM model named {', '.join(sorted(unknown))} to pack in {repo}",
            hint=f"the repository's vLLM models: {', '.join(sorted(texts))}",
        )
    packed, absolute = _pack(repo, texts, sorted(packing), gpu, num_gpus, concurrency, vllm_version, margin_gib)
    inputs = [
        (name, engine_options(data, gpu, num_gpus, vllm_version, texts[name][0].parent, name))
        for name, (*_, data) in texts.items()
        if name not in packing
    ]
    used = len(packed)
    try:
        plans = choose(inputs, num_gpus - used, concurrency, first_gpu=used) if inputs else []
    except PlanError as exc:
        if not packing and num_gpus > 0:
            exc.hint = _packing_hint(repo, texts, gpu, num_gpus, concurrency, vllm_version, margin_gib) or exc.hint
        raise
    changes: dict[Path, tuple[str, str]] = {}

    def change(path: Path, old: str, new: str) -> None:
        if new != old:
            changes[path] = (old, new)

    for p in plans:
        cfg_path, cfg_text, doc_path, doc_text, data = texts[p.name]
        p.dropped = shared_budget(data)
        change(cfg_path, cfg_text, placement_config(cfg_text, p.gpu_groups))
        change(doc_path, doc_text, placement_engine_args(doc_text, p.chosen.tensor_parallel_size, drop=p.dropped))
    for on_gpu in packed:
        for engine in on_gpu.engines:
            cfg_path, cfg_text, doc_path, doc_text, _ = texts[engine.name]
            others = [e.name for e in on_gpu.engines if e.name != engine.name]
            why = f" --pack: one engine on GPU {on_gpu.gpu}" + (f", shared with {', '.join(others)}" if others else "")
            why += "; its memory budget is in model.json."
            change(cfg_path, cfg_text, placement_config(cfg_text, [(on_gpu.gpu,)], why))
            budget: dict[str, int | float] = {"gpu_memory_utilization": engine.gpu_memory_utilization}
            if absolute:
                budget["kv_cache_memory_bytes"] = engine.kv_bytes
            change(doc_path, doc_text, placement_engine_args(doc_text, 1, budget))
    return RepositoryPlan(plans, packed, absolute, changes)


def _pack(
    repo: Path,
    texts: dict[str, tuple[Path, str, Path, str, dict[str, Any]]],
    names: list[str],
    gpu: str | float,
    num_gpus: int,
    concurrency: int,
    vllm_version: str | None,
    margin_gib: float | None,
) -> tuple[list[PackedGpu], bool]:
    """The packed GPUs for models ``names`` (GPUs 0 on), and whether their KV caches are set in bytes."""
    if not names:
        return [], False
    from vllm_repo.estimate import packing as pack_
    from vllm_repo.estimate import resolve_gpu
    from vllm_repo.releases.memory_budget import resolve_release

    gpu_ = resolve_gpu(gpu)
    release, _ = resolve_release(vllm_version, repo)
    costs = []
    for name in names:
        cfg_path, _, _, _, data = texts[name]
        settings, facts = _settings_and_facts(data, cfg_path.parent, name)
        costs.append(pack_.engine_cost(name, settings, facts, gpu_, release, concurrency))
    try:
        packed = pack_.pack(costs, gpu_, release, range(num_gpus), margin_gib)
    except pack_.PackError as exc:
        raise PlanError(exc.message, hint=exc.hint) from None
    return packed, pack_.supports_absolute_kv(release)


def _packing_hint(
    repo: Path,
    texts: dict[str, tuple[Path, str, Path, str, dict[str, Any]]],
    gpu: str | float,
    num_gpus: int,
    concurrency: int,
    vllm_version: str | None,
    margin_gib: float | None,
) -> str | None:
    """When the models need more GPUs than there are, but fit with engines sharing GPUs: say so."""
    try:
        packed, _ = _pack(repo, texts, sorted(texts), gpu, num_gpus, concurrency, vllm_version, margin_gib)
    except (PlanError, UsageError):
        return None
    shared = [p for p in packed if len(p.engines) > 1]
    if not shared:
        return None
    from vllm_repo.estimate.pack_advice import pack_command

    where = "; ".join(f"{', '.join(e.name for e in p.engines)} on GPU {p.gpu}" for p in shared)
    command = pack_command(repo, str(gpu), num_gpus, vllm_version, write=False)
    if concurrency != 1:
        command += f" --concurrency {concurrency}"
    if margin_gib is not None:
        command += f" --margin-gib {margin_gib:g}"
    return f"they fit when packed ({where}): `{command}` shows how, with --write it writes it"


def _settings_and_facts(data: dict[str, Any], base: Path, name: str) -> tuple[EngineSettings, ModelFacts]:
    from vllm_repo.estimate import ArchitectureError, ModelFactsError, load_model_facts
    from vllm_repo.repository.engine_settings import read_engine_settings

    settings = read_engine_settings(data, strict=True)
    if not settings.model:
        where = f"{name}: " if name else ""
        raise PlanError(f"{where}model.json has no `model`", hint="add the model's repo id or path")
    try:
        facts = load_model_facts(settings.model, offline=True, revision=settings.revision, base=base)
        facts.arch.check_decoder_shape()
    except (ModelFactsError, ArchitectureError) as exc:
        raise PlanError(
            f"can't size {settings.model}: {getattr(exc, 'message', exc)}",
            hint="plan reads the model's config.json offline: a local model directory or the Hugging Face cache",
        ) from None
    return settings, facts
