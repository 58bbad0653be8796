"""`vllm-repo init`: options in, scaffold.init_model out."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import force_option, gpu_option, tensor_parallel_option, vllm_version_option
from vllm_repo.cli.output import print_diagnostics, print_notes


def init(
    repo: Annotated[Path, typer.Argument(help="Model repository directory (created if missing).")],
    model: Annotated[str, typer.Option("--model", "-m", help="Hugging Face repo id or local model directory.")],
    name: Annotated[
        str | None, typer.Option("--name", help="Model name (its directory); defaults from --model.")
    ] = None,
    gpu: Annotated[
        str | None, gpu_option("to size the engine for", "none, the sizing is left to vLLM", counted=True)
    ] = None,
    tp: Annotated[int | None, tensor_parallel_option()] = None,
    max_model_len: Annotated[
        int | None, typer.Option("--max-model-len", help="Longest prompt + completion in tokens.")
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Extra engine argument for model.json (repeatable)."),
    ] = None,
    loras: Annotated[
        list[str] | None,
        typer.Option("--lora", metavar="NAME=PATH", help="LoRA adapter for multi_lora.json (repeatable)."),
    ] = None,
    vllm_version: Annotated[str | None, vllm_version_option("to check the settings against")] = None,
    force: Annotated[bool, force_option("an existing model of that name")] = False,
) -> None:
    """Scaffold REPO/NAME/config.pbtxt and REPO/NAME/1/model.json for a model."""
    from vllm_repo.scaffold import init_model, parse_loras, parse_settings
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    schema = load_schema(choose_schema_version(vllm_version, start=repo).schema_version)
    result = init_model(
        repo,
        model,
        name=name,
        gpu=gpu,
        tensor_parallel_size=tp,
        max_model_len=max_model_len,
        settings=parse_settings(settings or [], schema),
        loras=parse_loras(loras or []),
        force=force,
        vllm_version=vllm_version,
    )
    verb = "replaced" if result.replaced else "created"
    typer.echo(f"{verb} model '{result.model_dir.name}' in {result.model_dir.parent}:")
    for path in result.files:
        typer.echo(f"  {path}")
    print_notes(result.notes)
    print_diagnostics(result.diagnostics)
    if result.next_step is not None:
        typer.echo(f"next: {result.next_step}")
