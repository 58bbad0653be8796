"""`vllm-repo estimate`: parse options, call vllm_repo.estimate, print."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vllm_repo.errors import UsageError


def estimate(
    model: str = typer.Argument(..., help="Hugging Face repo id, local model directory, or a Triton model "
                                "directory (its <version>/model.json supplies the settings)."),
    gpu: str = typer.Option(None, "--gpu", help="GPU name, e.g. 'H100 80GB', 'A100 40GB', L40S, L4, H200 "
                            "(default: gpu in \\[tool.vllm-repo] of pyproject.toml or .vllm-repo.toml)."),
    gpu_memory_gib: float = typer.Option(None, "--gpu-memory-gib", help="GPU memory in GiB, instead of --gpu."),
    num_gpus: int = typer.Option(None, "--num-gpus", help="GPUs available: bounds tensor_parallel_size x "
                                 "pipeline_parallel_size and the TP recommendation."),
    tp: int = typer.Option(None, "--tp", "--tensor-parallel-size", help="tensor_parallel_size."),
    pp: int = typer.Option(None, "--pp", "--pipeline-parallel-size", help="pipeline_parallel_size."),
    gpu_memory_utilization: float = typer.Option(None, "--gpu-memory-utilization",
                                                 help="Default: the release's (0.9, or 0.92 since 0.21)."),
    max_model_len: int = typer.Option(None, "--max-model-len", help="Default: the model's context length."),
    max_num_seqs: int = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: int = typer.Option(None, "--max-num-batched-tokens"),
    dtype: str = typer.Option(None, "--dtype", help="auto, bfloat16, float16 or float32."),
    quantization: str = typer.Option(None, "--quantization", help="e.g. fp8 for online FP8 weights."),
    kv_cache_dtype: str = typer.Option(None, "--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_e5m2, ..."),
    enforce_eager: bool = typer.Option(None, "--enforce-eager/--no-enforce-eager", help="No CUDA graphs."),
    vllm_version: str = typer.Option(None, "--vllm-version", help="vLLM release to model (default: the "
                                     "installed vLLM, else the newest known)."),
    usage_context: str = typer.Option(None, "--usage-context", help="engine (Triton's vLLM backend, the "
                                      "default), server (vllm serve) or llm (the LLM class): batch defaults differ."),
    target_concurrency: float = typer.Option(None, "--concurrency", help="Requests at max_model_len the KV cache "
                                             "should hold; recommendations aim for it."),
    offline: bool = typer.Option(None, "--offline/--online", help="Never touch the network (default: "
                                 "HF_HUB_OFFLINE)."),
    revision: str = typer.Option(None, "--revision", help="Model revision on the Hub."),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
) -> None:
    """Predict vLLM's GPU memory split and whether the model starts, before loading it.

    Exits 0 when vLLM would start, 1 when it would not, 2 on bad input."""
    from vllm_repo.estimate import engine_settings, estimate_model
    from vllm_repo.estimate.report import render
    from vllm_repo.estimate.target import resolve_target
    from vllm_repo.settings import load_settings

    target = resolve_target(model)
    project = load_settings(target.model_json.parent if target.model_json else Path.cwd())
    settings = engine_settings(target.engine_args)
    if gpu and gpu_memory_gib:
        raise UsageError("give --gpu or --gpu-memory-gib, not both")
    gpu_spec = gpu or gpu_memory_gib or project.gpu_spec
    if gpu_spec is None:
        raise UsageError("which GPU?", hint="pass --gpu NAME (e.g. --gpu 'H100 80GB') or --gpu-memory-gib X, or set "
                         "gpu in [tool.vllm-repo] of pyproject.toml / .vllm-repo.toml")
    flags = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp,
             "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens, "dtype": dtype,
             "quantization": quantization, "kv_cache_dtype": kv_cache_dtype, "enforce_eager": enforce_eager}
    settings.update({k: v for k, v in flags.items() if v is not None})
    result = estimate_model(
        target.model, gpu_spec, num_gpus=num_gpus or project.num_gpus,
        vllm_version=vllm_version or project.vllm_version, offline=offline,
        revision=revision or target.engine_args.get("revision"),
        usage_context=usage_context or project.usage_context or "engine",
        target_concurrency=target_concurrency, **settings)
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
        how = "measured" if gpu.measured else "nvidia-smi less the usual runtime gap (approximate)"
        typer.echo(f"{gpu.name:<14} {gpu.total_gib:>7.2f} GiB  {how}; {gpu.source}")
