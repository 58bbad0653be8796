"""`vllm-repo init`: options in, scaffold.init_model out."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from vllm_repo.cli.output import print_diagnostics, print_notes


def init(
    repo: Path = typer.Argument(..., help="Model repository directory (created if missing)."),
    model: str = typer.Option(..., "--model", "-m", help="Hugging Face repo id or local model directory."),
    name: Optional[str] = typer.Option(None, "--name", help="Model name (its directory); defaults from --model."),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", help="Target GPU: size the engine for it (H100, L4, 2xL4, or a size in GiB such as 24)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="tensor_parallel_size."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len", help="Longest prompt + completion in tokens."),
    settings: List[str] = typer.Option(
        [], "--set", help="Extra engine argument KEY=VALUE for model.json (repeatable)."),
    loras: List[str] = typer.Option([], "--lora", help="LoRA adapter NAME=PATH for multi_lora.json (repeatable)."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="vLLM release to check settings against."),
    force: bool = typer.Option(False, "--force", help="Replace an existing model of that name."),
) -> None:
    """Scaffold REPO/NAME/config.pbtxt and REPO/NAME/1/model.json for a model."""
    from vllm_repo.scaffold import init_model, parse_loras, parse_settings
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    schema = load_schema(choose_schema_version(vllm_version).schema_version)
    result = init_model(
        repo, model, name=name, gpu=gpu, tensor_parallel_size=tp, max_model_len=max_model_len,
        settings=parse_settings(settings, schema), loras=parse_loras(loras), force=force, vllm_version=vllm_version,
    )
    verb = "replaced" if result.replaced else "created"
    typer.echo(f"{verb} model '{result.model_dir.name}' in {result.model_dir.parent}:")
    for path in result.files:
        typer.echo(f"  {path}")
    print_notes(result.notes)
    print_diagnostics(result.diagnostics)
    typer.echo(f"next: vllm-repo launch {result.model_dir.parent}")
