"""VR4xx: engine arguments against the model's own Hugging Face config.json, when it is reachable offline."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo import hf
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.validate.rules.common import engine_args_objects
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule


def _with_config(model, ctx):
    for doc in engine_args_objects(model):
        settings = read_engine_settings(doc.data)
        if not settings.model or not settings.model.strip():
            continue
        try:
            # The working directory first, then the model directory: where the memory check (VR601) looks too.
            found = hf.find_local_config(settings.model, settings.revision, base=model.path)
        except (OSError, RuntimeError, ValueError):  # a "model" no file system accepts (~unknown_user, too long)
            continue
        if found is not None:
            yield doc, settings, found[0], found[1]


@rule("VR401", "max-model-len-too-long", Severity.ERROR)
def max_model_len_too_long(model, ctx: CheckContext) -> Iterator[Finding]:
    """max_model_len above the model's own maximum context (vLLM refuses to start).

    vLLM derives the longest context a model supports from its config.json (max_position_embeddings and similar keys,
    with RoPE scaling) and refuses a larger max_model_len unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set. Like every
    VR4 rule it reads config.json only where it is reachable offline: "model" a local directory (a relative path is
    taken from the working directory: run the example from its root as `vllm-repo validate model_repository`) or a
    model in the local Hugging Face cache.

    Example::

        # model_repository/llm/config.pbtxt
        backend: "vllm"
        # model_repository/llm/1/model.json
        {"model": "models/Qwen2.5-0.5B-Instruct", "max_model_len": 65536}
        # models/Qwen2.5-0.5B-Instruct/config.json
        {"model_type": "qwen2", "num_attention_heads": 14, "max_position_embeddings": 32768}
    """
    for doc, settings, config_path, config in _with_config(model, ctx):
        wanted = settings.max_model_len
        limit = hf.derived_max_model_len(config)
        if wanted is None or limit is None or wanted <= limit or wanted < 0:
            continue
        yield Finding(
            doc.path,
            f"max_model_len {wanted} is above the model's maximum context {limit} "
            f"(from {config_path}); vLLM refuses to start",
            doc.position_of("max_model_len"),
            hint=f"set max_model_len to at most {limit}, or remove it to use the model's own",
        )


@rule("VR402", "tensor-parallel-heads", Severity.ERROR)
def tensor_parallel_heads(model, ctx: CheckContext) -> Iterator[Finding]:
    """tensor_parallel_size must divide the model's attention heads.

    vLLM splits the attention heads evenly across the tensor-parallel GPUs and refuses a tensor_parallel_size that does
    not divide num_attention_heads; the hint lists sizes that do. Run the example from its root (see VR401).

    Example::

        # model_repository/llm/config.pbtxt
        backend: "vllm"
        # model_repository/llm/1/model.json
        {"model": "models/Qwen2.5-0.5B-Instruct", "tensor_parallel_size": 4}
        # models/Qwen2.5-0.5B-Instruct/config.json
        {"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2}
    """
    for doc, settings, config_path, config in _with_config(model, ctx):
        tp = settings.tensor_parallel_size
        heads = hf.attention_heads(config)
        if tp is None or tp < 1 or heads is None or heads % tp == 0:
            continue
        # Bounded: a config with absurd head counts must not make this loop run for ever.
        fits = [n for n in range(1, min(heads, max(tp * 2, 8), 1024) + 1) if heads % n == 0]
        yield Finding(
            doc.path,
            f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads (from {config_path})",
            doc.position_of("tensor_parallel_size"),
            hint=f"use one of {', '.join(map(str, fits))}",
        )
