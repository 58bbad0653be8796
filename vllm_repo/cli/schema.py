"""`vllm-repo schema ...`: the bundled EngineArgs schemas."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import force_option, vllm_version_option
from vllm_repo.errors import UsageError, VllmRepoError

schema_app = typer.Typer(
    help="vLLM EngineArgs schemas: generate, list, show a key, JSON Schema for editors.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _write(path: Path, text: str, force: bool) -> None:
    from vllm_repo.files import write_atomic

    if path.exists() and not force:
        raise VllmRepoError(f"{path} exists", hint="pass --force to replace it")
    write_atomic(path, text)


@schema_app.command("generate")
def generate(
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write (default: ./vllm-<version>.json; '-' for stdout)."),
    ] = None,
    python: Annotated[
        Path | None, typer.Option("--python", help="Interpreter whose installed vLLM to read (default: this one).")
    ] = None,
    from_wheel: Annotated[
        str | None,
        typer.Option(
            "--from-wheel",
            metavar="VERSION",
            help="Read vLLM VERSION from its PyPI wheel instead (needs --python: an interpreter with a recent "
            "vLLM's dependencies).",
        ),
    ] = None,
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Write the EngineArgs schema of an installed vLLM (the only command that imports vLLM)."""
    from vllm_repo.schema import generate as schema_gen
    from vllm_repo.schema import wheel as schema_wheel

    if from_wheel and not python:
        raise UsageError(
            "--from-wheel needs --python", hint="an interpreter with vLLM's dependencies (torch, transformers)"
        )
    if from_wheel:
        document = schema_wheel.generate_from_wheel(from_wheel, str(python))
    elif python:
        document = schema_wheel.generate_installed(str(python))
    else:
        document = schema_gen.generate()
        document["vllm_version"] = schema_gen.base_version(document["vllm_version"])
    text = schema_gen.dump(document)
    if output is not None and str(output) == "-":
        sys.stdout.write(text)
        return
    path = output or Path(f"vllm-{document['vllm_version']}.json")
    _write(path, text, force)
    typer.echo(
        f"wrote {path}: {len(document['fields'])} engine arguments of vLLM {document['vllm_version']} "
        f"({document['source']})"
    )


@schema_app.command("list")
def list_releases(
    long: Annotated[bool, typer.Option("--long", "-l", help="Also print each release's key count and source.")] = False,
) -> None:
    """Print the bundled releases, one per line."""
    from vllm_repo.schema.info import release_lines

    for line in release_lines(long):
        typer.echo(line)


@schema_app.command("show")
def show(
    key: Annotated[str, typer.Argument(help="Engine argument, e.g. max_model_len (dashes work too).")],
    vllm_version: Annotated[str | None, vllm_version_option("whose schema to read")] = None,
) -> None:
    """Print an engine argument's type, default, choices, help and the releases that have it."""
    from vllm_repo.schema.info import describe_key, format_key_report

    report = describe_key(key.removeprefix("--").replace("-", "_"), vllm_version)
    typer.echo(format_key_report(report))
    if not report.found:
        raise typer.Exit(1)


@schema_app.command("json-schema")
def json_schema(
    vllm_version: Annotated[str | None, vllm_version_option("whose engine arguments to describe")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    force: Annotated[bool, force_option()] = False,
) -> None:
    """Write a JSON Schema (draft 2020-12) for model.json, for editors' validation and completion."""
    from vllm_repo.schema.json_schema import dumps, model_json_schema, raw_fields
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    choice = choose_schema_version(vllm_version)
    version = choice.schema_version
    text = dumps(model_json_schema(load_schema(version), raw_fields(version)))
    if output is None:
        sys.stdout.write(text)
        return
    _write(output, text, force)
    typer.echo(f"wrote {output}: JSON Schema for model.json, vLLM {choice.schema_version} ({choice.reason})", err=True)
