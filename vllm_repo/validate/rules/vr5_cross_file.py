"""VR5xx: checks across a model's files (model.json with config.pbtxt and multi_lora.json) and across models."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo.backend import contract
from vllm_repo.hf import is_repo_id
from vllm_repo.repository import LORA_FILE, ModelDirectory, ModelRepository, placement
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.validate.diagnostics import Severity
from vllm_repo.validate.rules import CheckContext, Finding, rule
from vllm_repo.validate.rules.common import count_text, path_exists, vllm_engine_args


def _engine_args(model: ModelDirectory) -> tuple[JsonDocument, dict] | None:
    doc = model.checked_engine_args()
    return None if doc is None else (doc, doc.data)


def _engine_args_and_config(model: ModelDirectory):
    """(model.json document, its data, the parsed config.pbtxt document), or None when either is unusable."""
    found = _engine_args(model)
    cfg = model.config
    if found is None or cfg is None or cfg.config is None:
        return None
    return (*found, cfg)


@rule("VR501", "lora-file", Severity.ERROR)
def lora_file(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """enable_lora needs <version>/multi_lora.json: a JSON object of adapter name -> adapter path.

    With enable_lora the backend reads the adapters from <version>/multi_lora.json, a JSON object of adapter name ->
    path, and fails to load the model without it; requests pick an adapter by name (lora_name). A multi_lora.json
    without enable_lora is reported as information: nothing reads it.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "enable_lora": true, "max_lora_rank": 16}
    """
    for version, doc in vllm_engine_args(model):
        if not doc.ok or not isinstance(doc.data, dict):
            continue
        enabled = doc.data.get("enable_lora") is True
        lora = version.multi_lora
        if enabled and lora is None:
            yield Finding(
                doc.path,
                f"enable_lora is true but {model.name}/{version.path.name}/{LORA_FILE} is "
                "missing; requests can't name an adapter",
                doc.position_of("enable_lora"),
                hint=f'add {LORA_FILE}: {{"<adapter name>": "<adapter path>"}}',
            )
        if lora is None:
            continue
        if not lora.ok:
            yield Finding(
                lora.path,
                lora.problem.message,
                lora.problem.position,
                hint=lora.problem.hint or f'{LORA_FILE} must be {{"<adapter name>": "<adapter path>", ...}}',
            )
            continue
        if not isinstance(lora.data, dict):
            yield Finding(lora.path, f"{LORA_FILE} must be a JSON object of adapter name -> path", None)
            continue
        for name, path in lora.data.items():
            if not isinstance(path, str) or not path.strip():
                yield Finding(lora.path, f"adapter '{name}' must map to a path string", lora.position_of(name))
        if not enabled:
            yield Finding(
                lora.path,
                f"{LORA_FILE} is ignored: model.json does not set enable_lora",
                None,
                severity=Severity.INFO,
                hint='add "enable_lora": true to use the adapters',
            )


@rule("VR502", "lora-adapter-missing", Severity.WARNING)
def lora_adapter_missing(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An adapter path in multi_lora.json that does not exist on this machine (fine if it exists in the container).

    vLLM loads an adapter from its path when a request first names it, so a wrong path shows up only then, as failed
    requests. Paths are checked on the machine validate runs on; names written as Hugging Face repo ids (owner/name)
    are not checked.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "enable_lora": true}
        # llm/1/multi_lora.json
        {"sql": "/opt/adapters/qwen2.5-0.5b-sql-lora"}
    """
    for version, doc in vllm_engine_args(model):
        lora = version.multi_lora
        if lora is None or not lora.ok or not isinstance(lora.data, dict) or not isinstance(doc.data, dict):
            continue
        if doc.data.get("enable_lora") is not True:
            continue
        for name, path in lora.data.items():
            if not isinstance(path, str) or not path.strip():
                continue
            if is_repo_id(path) or path_exists(path):
                continue
            yield Finding(
                lora.path,
                f"adapter '{name}' points at {path}, which does not exist here",
                lora.position_of(name),
                hint="fine if the path exists inside the serving container; otherwise fix the path",
            )


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
    both = _engine_args_and_config(model)
    if both is None:
        return
    _, data, doc_cfg = both
    size = placement.parallel_size(data)
    kinds = [g.kind for g in doc_cfg.config.instance_group]
    from vllm_repo.repository.model_config import model_config_pb2

    if size > 1 and model_config_pb2().ModelInstanceGroup.KIND_GPU in kinds:
        yield Finding(
            doc_cfg.path,
            f"instance_group is KIND_GPU but model.json asks for {count_text(size)} GPUs "
            "(tensor_parallel_size x pipeline_parallel_size); a KIND_GPU instance sees one GPU",
            doc_cfg.field_position("KIND_GPU") or doc_cfg.field_position("kind"),
            hint="use kind: KIND_MODEL so vLLM places the model across GPUs",
        )


@rule("VR504", "gpu-oversubscribed", Severity.ERROR, scope="repository")
def gpu_oversubscribed(repo: ModelRepository, ctx: CheckContext) -> Iterator[Finding]:
    """Models sharing a GPU whose gpu_memory_utilization adds up to more than 1.0.

    gpu_memory_utilization is the share of a GPU's total memory one engine may use, and at startup vLLM requires that
    much memory to be free; engines on the same GPU whose shares add up to more than 1.0 can't all start. Models
    without instance_group get an instance on every GPU, so the two models below share GPU 0.

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
    found = placement.engines(repo.models, placement.default_memory_fraction(ctx.schema))
    if len(found) < 2:
        return
    gpu_ids = set().union(*(e.gpus for e in found if e.gpus)) or {0}
    reported: set[frozenset[str]] = set()
    for gpu in sorted(gpu_ids):
        sharing = placement.sharing(found, gpu)
        total = sum(e.fraction for e in sharing)
        names = frozenset(e.model.name for e in sharing)
        if len(sharing) < 2 or total <= 1.0 + 1e-9 or names in reported:
            continue
        if not any(repo.is_selected(e.model) for e in sharing):
            continue
        reported.add(names)
        parts = " + ".join(f"{e.model.name} {e.fraction:g}" for e in sharing)
        for engine in sharing:
            model, doc = engine.model, engine.engine_args
            if repo.is_selected(model):
                yield Finding(
                    doc.path,
                    f"GPU {gpu} is shared by {len(sharing)} models whose gpu_memory_utilization "
                    f'adds up to {total:.2f} ({parts}); the later ones fail with "No available memory '
                    'for the cache blocks"',
                    doc.position_of("gpu_memory_utilization"),
                    hint="lower the fractions so they sum to at most 1.0 (leave room for CUDA contexts), "
                    "or pin models to different GPUs with KIND_GPU gpus: [...]",
                )


@rule("VR505", "metrics-without-stats", Severity.WARNING)
def metrics_without_stats(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """REPORT_CUSTOM_METRICS on while model.json sets disable_log_stats: the metrics stay empty.

    vLLM collects the statistics behind its metrics only while log stats are on, so with disable_log_stats true
    Triton's stock vLLM backend publishes metrics that never change. vllm-repo's backend collects them either way.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "disable_log_stats": true}
    """
    both = _engine_args_and_config(model)
    if both is None:
        return
    doc, data, cfg = both
    param = cfg.config.parameters.get("REPORT_CUSTOM_METRICS")
    if param is None or param.string_value.strip().lower() not in contract.TRUE_STRINGS:
        return
    if data.get("disable_log_stats") is True:
        yield Finding(
            doc.path,
            "REPORT_CUSTOM_METRICS is on in config.pbtxt but disable_log_stats is true: vLLM "
            "collects no stats, so Triton's stock vLLM backend reports metrics that never move (the "
            "vllm-repo backend collects them regardless)",
            doc.position_of("disable_log_stats"),
            hint="set disable_log_stats to false, or turn REPORT_CUSTOM_METRICS off",
        )
