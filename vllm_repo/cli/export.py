"""`vllm-repo export ...`: deployment manifests for a model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import force_option, vllm_version_option
from vllm_repo.cli.output import print_diagnostics

# The defaults are the library's (the command module is imported only when the command runs).
from vllm_repo.export.operator import OperatorOptions
from vllm_repo.export.plan import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_HF_TOKEN_SECRET,
    DEFAULT_READ_MB_S,
    DEFAULT_REPOSITORY_FROM,
)

OPERATOR_DEFAULTS = OperatorOptions()

export_app = typer.Typer(
    help="Deployment manifests for a model repository (Kubernetes).", no_args_is_help=True, rich_markup_mode=None
)


@export_app.command("kubernetes")
def kubernetes(
    repository: Annotated[Path, typer.Argument(help="The model repository.")],
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", help="GPUs of one node; an engine needing more spans nodes (LWS).")
    ] = DEFAULT_GPUS_PER_NODE,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="The image the pods run, built by the exported Dockerfile (default: a local name; give your "
            "registry's).",
        ),
    ] = None,
    base_image: Annotated[
        str | None,
        typer.Option(
            "--base-image", help="The Dockerfile's FROM (default: the NGC tritonserver vllm-python-py3 of the vLLM)."
        ),
    ] = None,
    vllm_version: Annotated[str | None, vllm_version_option("that picks the NGC image", "the newest image")] = None,
    repository_from: Annotated[
        str,
        typer.Option(
            "--repository-from", help="configmap, pvc:CLAIM[/PATH] or image:IMAGE (its /models, by an init container)."
        ),
    ] = DEFAULT_REPOSITORY_FROM,
    name: Annotated[str | None, typer.Option("--name", help="Object name (default: the repository's).")] = None,
    hf_token_secret: Annotated[
        str, typer.Option("--hf-token-secret", help="Secret whose key 'token' becomes HF_TOKEN.")
    ] = DEFAULT_HF_TOKEN_SECRET,
    read_bandwidth: Annotated[
        float, typer.Option("--read-bandwidth", help="MB/s the load-time estimate assumes for reading weights.")
    ] = DEFAULT_READ_MB_S,
    openai_port: Annotated[
        int | None,
        typer.Option("--openai-port", metavar="PORT", help="Also run the OpenAI/Anthropic gateway in the pod on PORT."),
    ] = None,
    api_key_secret: Annotated[
        str | None,
        typer.Option("--api-key-secret", help="With --openai-port: Secret whose key 'key' becomes the API key."),
    ] = None,
    cpu: Annotated[str | None, typer.Option("--cpu", help="CPU request (default: 2 + 2 per GPU; no limit).")] = None,
    memory: Annotated[
        str | None, typer.Option("--memory", help="Memory request and limit (default: sized from the engines).")
    ] = None,
    hf_cache: Annotated[
        str,
        typer.Option("--hf-cache", help="new[:SIZE] (a claim sized from the checkpoints), pvc:CLAIM or emptydir."),
    ] = OPERATOR_DEFAULTS.hf_cache,
    storage_class: Annotated[
        str | None, typer.Option("--storage-class", help="StorageClass of the claims the export makes.")
    ] = None,
    volume: Annotated[
        list[str] | None,
        typer.Option("--volume", help="CLAIM[/PATH]:/MOUNT: a claim mounted read-only (local weights); repeatable."),
    ] = None,
    node_selector: Annotated[
        list[str] | None, typer.Option("--node-selector", help="KEY=VALUE the nodes must have; repeatable.")
    ] = None,
    toleration: Annotated[
        list[str] | None,
        typer.Option("--toleration", help="KEY[=VALUE][:EFFECT] tolerated (besides nvidia.com/gpu); repeatable."),
    ] = None,
    affinity: Annotated[
        Path | None, typer.Option("--affinity", help="A JSON file with the pods' affinity object.")
    ] = None,
    run_as_user: Annotated[
        int, typer.Option("--run-as-user", help="User id of the containers (0: root; the image's user is 1000).")
    ] = OPERATOR_DEFAULTS.run_as_user,
    grace_period: Annotated[
        int, typer.Option("--grace-period", help="Seconds a stopping pod has for the requests in flight.")
    ] = OPERATOR_DEFAULTS.grace_period_s,
    max_replicas: Annotated[
        int | None,
        typer.Option("--max-replicas", help="Add an autoscaler up to this many replicas, on waiting requests."),
    ] = None,
    waiting_target: Annotated[
        int, typer.Option("--waiting-target", help="With --max-replicas: waiting requests per pod to scale at.")
    ] = OPERATOR_DEFAULTS.waiting_target,
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit non-zero, writing nothing, when the export has findings.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Write DIR/<name>.yaml and DIR/Dockerfile instead of printing the manifests."),
    ] = None,
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Deployment + Service (one node) or LeaderWorkerSet + Service (Ray across nodes) for a repository, and the
    Dockerfile of the image they run. Findings go to stderr as warnings."""
    from vllm_repo.export import export_kubernetes, write_export
    from vllm_repo.export.plan import ExportFindingsError

    options = OperatorOptions(
        cpu=cpu,
        memory=memory,
        hf_cache=hf_cache,
        storage_class=storage_class,
        volumes=tuple(volume or ()),
        node_selector=tuple(node_selector or ()),
        tolerations=tuple(toleration or ()),
        affinity=affinity,
        run_as_user=run_as_user,
        grace_period_s=grace_period,
        max_replicas=max_replicas,
        waiting_target=waiting_target,
    )
    result = export_kubernetes(
        repository,
        gpus_per_node=gpus_per_node,
        image=image,
        base_image=base_image,
        vllm_version=vllm_version,
        repository_from=repository_from,
        name=name,
        hf_token_secret=hf_token_secret,
        read_mb_s=read_bandwidth,
        openai_port=openai_port,
        api_key_secret=api_key_secret,
        operator=options,
    )
    print_diagnostics(result.findings)
    for note in result.storage_notes:
        typer.echo(f"note: {note}", err=True)
    if strict and result.findings:
        count = len(result.findings)
        raise ExportFindingsError(
            f"{count} finding{'s' * (count != 1)} (--strict); nothing written",
            hint="fix what the warnings above say, or export without --strict",
        )
    if output is None:
        typer.echo(result.text, nl=False)
        if result.build is not None:
            typer.echo(f"note: the image {result.image} is built from a Dockerfile: --output DIR writes it", err=True)
        return
    written = write_export(result, output, force=force)
    kind = "LeaderWorkerSet" if result.multi_node else "Deployment"
    typer.echo(f"wrote {', '.join(map(str, written))} ({kind} {result.name}, {result.image})")
    if result.build is not None:
        hint = result.build.registry_hint
        typer.echo(f"build{'' if hint else ' and push'} the image, then apply:", err=True)
        for command in result.build.commands(directory=str(output)):
            typer.echo(f"  {command}", err=True)
        typer.echo(f"  kubectl apply -f {written[0]}", err=True)
        if hint:
            typer.echo(f"note: {hint}", err=True)
