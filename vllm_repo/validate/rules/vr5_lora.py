"""VR5xx, LoRA: a model's multi_lora.json read against its model.json (enable_lora and the adapters it names)."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.hf import is_repo_id
from vllm_repo.repository import LORA_FILE, ModelDirectory
from vllm_repo.validate.rules.common import path_exists, vllm_engine_args
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule


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
        if lora.problem is not None:
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
