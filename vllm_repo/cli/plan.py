"""`vllm-repo plan`: place a repository's models on one host's GPUs, and write the placement when asked."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import diff_option, gpu_option, num_gpus_option, vllm_version_option
from vllm_repo.errors import UsageError


def plan(
    repo: Annotated[Path, typer.Argument(help="Model repository whose vLLM models share the host.")],
    gpu: Annotated[str | None, gpu_option("of the host")] = None,
    num_gpus: Annotated[int | None, num_gpus_option("of the host")] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency", min=1, help="Sequences of max_model_len tokens each model must hold at once, in all."
        ),
    ] = 1,
    vllm_version: Annotated[str | None, vllm_version_option("whose memory behaviour to plan for")] = None,
    pack: Annotated[
        list[str] | None,
        typer.Option(
            "--pack",
            help="Place these models' engines on shared GPUs, each with a memory budget of its own (repeat it, or "
            "give 'all'); the project setting pack does the same.",
        ),
    ] = None,
    margin_gib: Annotated[
        float | None,
        typer.Option("--margin-gib", min=0, help="Memory each packed GPU keeps free (default: 5 % of it)."),
    ] = None,
    write: Annotated[bool, typer.Option("--write", help="Write config.pbtxt and model.json (atomically).")] = False,
    diff: Annotated[bool, diff_option("--write")] = False,
) -> None:
    """Choose per model between tensor parallelism and more instances, so every model fits; with --pack, several
    models' engines share a GPU, each with an absolute memory budget."""
    from vllm_repo.diagnostics.diagnostic import display_path
    from vllm_repo.diagnostics.fixes import FixPlan
    from vllm_repo.scaffold.plan import plan_repository
    from vllm_repo.settings import resolve_settings

    settings = resolve_settings(repo, gpu=gpu, num_gpus=num_gpus, vllm_version=vllm_version)
    if settings.gpu_spec is None or settings.num_gpus is None:
        raise UsageError(
            "plan needs the host's GPU and how many there are",
            hint="pass --gpu H100 --num-gpus 8, or set gpu and num-gpus in [tool.vllm-repo]",
        )
    if write and diff:
        raise UsageError("--write and --diff exclude each other", hint="--diff shows, --write writes")
    options = [name for name in pack or () if name.startswith("-")]
    if options:
        # `--pack --write`: the option took the next flag as its value.
        raise UsageError(
            f"--pack needs a value, `all` or model names; it took {options[0]} for one",
            hint=f"write --pack all {options[0]}, or --pack NAME,NAME {options[0]}",
        )
    packing: bool | list[str] = settings.pack or False
    if pack:
        packing = True if "all" in pack else [name for names in pack for name in names.split(",") if name]
    planned = plan_repository(
        repo,
        settings.gpu_spec,
        settings.num_gpus,
        concurrency,
        vllm_version=settings.vllm_version,
        pack=packing,
        margin_gib=margin_gib,
    )
    changes = planned.changes
    if diff:
        # The patch alone on stdout (it can go to `git apply`), what it means on stderr. Showing it is what was asked:
        # the command succeeded whether or not there is something to change.
        typer.echo(FixPlan(texts=changes).diff({p: display_path(p) for p in changes}), nl=False)
        typer.echo(
            f"{len(changes)} file(s) would change: --write writes them"
            if changes
            else "the repository is already placed so",
            err=True,
        )
        return
    typer.echo("\n".join(planned.explain(concurrency)))
    if not changes:
        typer.echo("the repository is already placed so", err=True)
    elif write:
        FixPlan(texts=changes).write()
        for path in sorted(changes):
            typer.echo(f"wrote {display_path(path)}", err=True)
    else:
        typer.echo(f"{len(changes)} file(s) would change: --diff shows how, --write writes them", err=True)
