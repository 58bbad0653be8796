"""VR6xx: will vLLM start? The memory estimator on the model's own config, when a GPU is known
(`--gpu`, or `gpu` in [tool.vllm-repo] of pyproject.toml / .vllm-repo.toml) and the config is reachable offline."""

from __future__ import annotations

from collections.abc import Iterator

from vllm_repo import hf
from vllm_repo.errors import UsageError
from vllm_repo.repository import ModelDirectory
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.validate.diagnostics import Severity
from vllm_repo.validate.rules.common import count_text, engine_args_objects, vllm_engine_args
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule


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
        try:
            est = estimate_for_engine_args(
                doc.data, ctx.gpu, vllm_version=ctx.schema.vllm_version, offline=True, base=model.path
            )
        except (UsageError, ArithmeticError):  # ArithmeticError: numbers beyond float range
            continue  # settings vLLM rejects outright (EstimateError) are the engine-args rules' findings
        if est is None or est.fits:
            continue
        if est.model_max_model_len is not None and est.max_model_len > est.model_max_model_len:
            continue  # a context longer than the model's own is VR401's finding, not a memory one
        hint = "; ".join(f"{r.setting}={r.value} ({r.reason})" for r in est.recommendations[:3]) or None
        # At the setting the first recommendation changes, where the file has it.
        keys = [r.setting for r in est.recommendations[:1]] + ["max_model_len", "gpu_memory_utilization", "model"]
        where = next((doc.position_of(k) for k in keys if doc.position_of(k) is not None), None)
        yield Finding(
            doc.path,
            f"on {est.gpu} this model won't start: weights {est.weights_gib:.1f} GiB, "
            f"activations {est.activation_gib:.1f} GiB, CUDA graphs {est.cudagraph_gib:.1f} GiB of a "
            f"{est.requested_gib:.1f} GiB budget leave {est.kv_cache_gib:.2f} GiB for the KV cache. "
            f"vLLM: {est.error}",
            where,
            hint=hint,
        )


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
    from vllm_repo.estimate import ArchitectureError, ModelFactsError, load_model_facts

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
            yield Finding(
                doc.path,
                f"the memory check on {ctx.gpu.name} did not run: {exc.message}",
                doc.position_of("model"),
                hint=f"fetch the config once (`huggingface-cli download {settings.model} config.json`), or point "
                '"model" at a local directory'
                if hf.is_repo_id(settings.model)
                else None,
            )
