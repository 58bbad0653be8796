"""VR4xx: engine arguments against the model's own Hugging Face config.json, when it is reachable offline."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo import hf
from vllm_repo.validate.diagnostics import Severity
from vllm_repo.validate.rules import CheckContext, Finding, rule
from vllm_repo.validate.rules.common import engine_args_objects


def _with_config(model, ctx):
    for doc in engine_args_objects(model):
        name = doc.data.get("model")
        if not isinstance(name, str) or not name.strip():
            continue
        revision = doc.data.get("revision") if isinstance(doc.data.get("revision"), str) else None
        try:
            found = hf.find_local_config(name, revision, base=None)
        except (OSError, RuntimeError, ValueError):  # a "model" no file system accepts (~unknown_user, too long)
            continue
        if found is not None:
            yield doc, found[0], found[1]


@rule("VR401", "max-model-len-too-long", Severity.ERROR)
def max_model_len_too_long(model, ctx: CheckContext) -> Iterator[Finding]:
    """max_model_len above the model's own maximum context (vLLM refuses to start)."""
    for doc, config_path, config in _with_config(model, ctx):
        wanted = doc.data.get("max_model_len")
        limit = hf.derived_max_model_len(config)
        if not isinstance(wanted, int) or isinstance(wanted, bool) or limit is None or wanted <= limit or wanted < 0:
            continue
        yield Finding(doc.path, f"max_model_len {wanted} is above the model's maximum context {limit} "
                      f"(from {config_path}); vLLM refuses to start", doc.position_of("max_model_len"),
                      hint=f"set max_model_len to at most {limit}, or remove it to use the model's own")


@rule("VR402", "tensor-parallel-heads", Severity.ERROR)
def tensor_parallel_heads(model, ctx: CheckContext) -> Iterator[Finding]:
    """tensor_parallel_size must divide the model's attention heads."""
    for doc, config_path, config in _with_config(model, ctx):
        tp = doc.data.get("tensor_parallel_size")
        heads = hf.attention_heads(config)
        if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1 or heads is None or heads % tp == 0:
            continue
        # Bounded: a config with absurd head counts must not make this loop run for ever.
        fits = [n for n in range(1, min(heads, max(tp * 2, 8), 1024) + 1) if heads % n == 0]
        yield Finding(doc.path, f"tensor_parallel_size {tp} does not divide the model's {heads} attention heads "
                      f"(from {config_path})", doc.position_of("tensor_parallel_size"),
                      hint=f"use one of {', '.join(map(str, fits))}")
