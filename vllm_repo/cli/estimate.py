"""`vllm-repo estimate`: parse options, call vllm_repo.estimate, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import gpu_option, num_gpus_option, tensor_parallel_option, vllm_version_option
from vllm_repo.errors import UsageError


def estimate(
    model: Annotated[
        str,
        typer.Argument(
            help="Hugging Face repo id, local model directory, or a Triton model directory (its "
            "<version>/model.json supplies the settings)."
        ),
    ],
    gpu: Annotated[str | None, gpu_option("to estimate for")] = None,
    gpu_memory_gib: Annotated[
        float | None, typer.Option("--gpu-memory-gib", help="GPU memory in GiB, instead of --gpu.")
    ] = None,
    num_gpus: Annotated[
        int | None,
        num_gpus_option(
            "available: they bound tensor_parallel_size x pipeline_parallel_size and the TP recommendation"
        ),
    ] = None,
    tp: Annotated[int | None, tensor_parallel_option()] = None,
    pp: Annotated[int | None, typer.Option("--pp", "--pipeline-parallel-size", help="pipeline_parallel_size.")] = None,
    gpu_memory_utilization: Annotated[
        float | None, typer.Option("--gpu-memory-utilization", help="Default: the release's (0.9, or 0.92 since 0.21).")
    ] = None,
    max_model_len: Annotated[
        int | None, typer.Option("--max-model-len", help="Default: the model's context length.")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option("--max-num-seqs")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens")] = None,
    dtype: Annotated[str | None, typer.Option("--dtype", help="auto, bfloat16, float16 or float32.")] = None,
    quantization: Annotated[str | None, typer.Option("--quantization", help="e.g. fp8 for online FP8 weights.")] = None,
    kv_cache_dtype: Annotated[
        str | None, typer.Option("--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_e5m2, ...")
    ] = None,
    enforce_eager: Annotated[
        bool | None, typer.Option("--enforce-eager/--no-enforce-eager", help="No CUDA graphs.")
    ] = None,
    vllm_version: Annotated[str | None, vllm_version_option("to model", "the newest bundled release")] = None,
    usage_context: Annotated[
        str | None,
        typer.Option(
            "--usage-context",
            help="engine (Triton's vLLM backend, the default), server (vllm serve) or llm (the LLM class): batch "
            "defaults differ.",
        ),
    ] = None,
    target_concurrency: Annotated[
        float | None,
        typer.Option(
            "--concurrency", help="Requests at max_model_len the KV cache should hold; recommendations aim for it."
        ),
    ] = None,
    offline: Annotated[
        bool | None, typer.Option("--offline/--online", help="Never touch the network (default: HF_HUB_OFFLINE).")
    ] = None,
    revision: Annotated[str | None, typer.Option("--revision", help="Model revision on the Hub.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the estimate as JSON.")] = False,
) -> None:
    """Predict vLLM's GPU memory split and whether the model starts, before loading it.

    Exits 0 when vLLM would start, 1 when it would not, 2 on bad input."""
    from vllm_repo.estimate import estimate_model
    from vllm_repo.estimate.report import render
    from vllm_repo.estimate.target import resolve_target
    from vllm_repo.repository.engine_settings import read_engine_settings
    from vllm_repo.settings import resolve_settings

    target = resolve_target(model)
    project = resolve_settings(
        target.model_json.parent if target.model_json else Path.cwd(),
        gpu=gpu,
        gpu_memory_gib=gpu_memory_gib,
        num_gpus=num_gpus,
        vllm_version=vllm_version,
        usage_context=usage_context,
    )
    if project.gpu_spec is None:
        raise UsageError(
            "which GPU?",
            hint="pass --gpu NAME (e.g. --gpu 'H100 80GB') or --gpu-memory-gib X, or set "
            "gpu in [tool.vllm-repo] of pyproject.toml / .vllm-repo.toml",
        )
    settings = read_engine_settings(target.engine_args, strict=True).overridden_by(
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        dtype=dtype,
        quantization=quantization,
        kv_cache_dtype=kv_cache_dtype,
        enforce_eager=enforce_eager,
        revision=revision,
    )
    result = estimate_model(
        target.model,
        project.gpu_spec,
        num_gpus=project.num_gpus,
        vllm_version=project.vllm_version,
        offline=offline,
        revision=settings.revision,
        usage_context=project.usage_context or "engine",
        target_concurrency=target_concurrency,
        settings=settings,
    )
    if as_json:
        document = result.model_dump(mode="json")
        if target.model_json:
            document["model_json"] = str(target.model_json)
        typer.echo(json.dumps(document, indent=2))
    else:
        if target.model_json:
            typer.echo(f"settings from {target.model_json}")
        typer.echo(render(result))
    raise typer.Exit(0 if result.fits else 1)


def gpus() -> None:
    """List the GPUs `estimate --gpu` knows, with the memory vLLM sees on each."""
    from vllm_repo.estimate.gpus import CATALOG

    for gpu in CATALOG:
        how = "measured" if gpu.measured else "the board's memory less the usual runtime gap (approximate)"
        typer.echo(f"{gpu.name:<14} {gpu.total_gib:>7.2f} GiB  {how}; {gpu.source}")
