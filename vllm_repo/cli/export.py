"""`vllm-repo export ...`: deployment manifests for a model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import force_option, vllm_version_option

export_app = typer.Typer(
    help="Deployment manifests for a model repository (Kubernetes).", no_args_is_help=True, rich_markup_mode=None
)


@export_app.command("kubernetes")
def kubernetes(
    repository: Annotated[Path, typer.Argument(help="The model repository.")],
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", help="GPUs of one node; an engine needing more spans nodes (LWS).")
    ] = 8,
    image: Annotated[
        str | None,
        typer.Option("--image", help="Container image (default: the NGC tritonserver vllm-python-py3 of the vLLM)."),
    ] = None,
    vllm_version: Annotated[str | None, vllm_version_option("that picks the NGC image", "the newest image")] = None,
    repository_from: Annotated[
        str,
        typer.Option(
            "--repository-from", help="configmap, pvc:CLAIM[/PATH] or image:IMAGE (its /models, by an init container)."
        ),
    ] = "configmap",
    name: Annotated[str | None, typer.Option("--name", help="Object name (default: the repository's).")] = None,
    hf_token_secret: Annotated[
        str, typer.Option("--hf-token-secret", help="Secret whose key 'token' becomes HF_TOKEN.")
    ] = "hf-token",
    read_bandwidth: Annotated[
        float, typer.Option("--read-bandwidth", help="MB/s the load-time estimate assumes for reading weights.")
    ] = 500,
    output: Annotated[Path | None, typer.Option("--output", help="Write DIR/<name>.yaml instead of printing.")] = None,
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Deployment + Service (one node) or LeaderWorkerSet + Service (Ray across nodes) for a repository."""
    from vllm_repo.export import export_kubernetes, write_export

    result = export_kubernetes(
        repository,
        gpus_per_node=gpus_per_node,
        image=image,
        vllm_version=vllm_version,
        repository_from=repository_from,
        name=name,
        hf_token_secret=hf_token_secret,
        read_mb_s=read_bandwidth,
    )
    if output is None:
        typer.echo(result.text, nl=False)
        return
    target = write_export(result, output, force=force)
    kind = "LeaderWorkerSet" if result.multi_node else "Deployment"
    typer.echo(f"wrote {target} ({kind} {result.name}, {result.image})")
