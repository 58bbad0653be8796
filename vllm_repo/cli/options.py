"""The options several commands take, one factory each: the same flag, metavar and help wording wherever it appears.

A command writes ``vllm_version: Annotated[str | None, vllm_version_option("to check model.json against")] = None``;
the factory says what every command's option has in common (the default chain of --vllm-version, what --gpu
accepts), the command only what the option is for there. Help texts are sentences: capitalised, ending with a full
stop. Only typer is imported here: every command's module imports this one.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

# schema.loader.target_vllm_version: the one rule every command follows when --vllm-version is not given.
_RELEASE_CHAIN = "vllm-version in [tool.vllm-repo], else the serving Python's vLLM, else the installed one"
_GPU_FORMS = "a name such as H100 or 'A100 40GB' (`vllm-repo gpus` lists them), or a size in GiB such as 24"


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def _help(when: str, text: str) -> str:
    """An option's help: ``when`` leads where the option depends on another ("With --openai-port: ..."), else the
    text is a sentence of its own, capitalised as every other option's help."""
    return f"{when}{text}" if when else text[:1].upper() + text[1:]


def vllm_version_option(purpose: str, otherwise: str = "the newest bundled schema", default: str | None = None) -> Any:
    """--vllm-version: "vLLM release ``purpose``", defaulting to the release every command picks (schema.loader's
    target_vllm_version), then ``otherwise``; ``default`` replaces the whole default where the command has its own."""
    return typer.Option(
        "--vllm-version",
        metavar="X.Y.Z",
        help=f"vLLM release {purpose} (default: {default or f'{_RELEASE_CHAIN}, else {otherwise}'}).",
    )


def gpu_option(purpose: str, default: str = "gpu in [tool.vllm-repo]", counted: bool = False) -> Any:
    """--gpu: "The GPU ``purpose``", what it accepts (``counted``: also 2xL4 for two), and where it comes from when
    it is not given."""
    forms = f"{_GPU_FORMS}; 2xL4 for two of them" if counted else _GPU_FORMS
    return typer.Option("--gpu", metavar="GPU", help=f"The GPU {purpose}: {forms} (default: {default}).")


def num_gpus_option(purpose: str, default: str = "num-gpus in [tool.vllm-repo]") -> Any:
    """--num-gpus: how many GPUs, at least one."""
    return typer.Option("--num-gpus", min=1, metavar="N", help=f"GPUs {purpose} (default: {default}).")


def tensor_parallel_option() -> Any:
    """--tp / --tensor-parallel-size, vLLM's own spelling beside the short one."""
    return typer.Option("--tp", "--tensor-parallel-size", help="tensor_parallel_size.")


def force_option(what: str = "an existing output file") -> Any:
    """--force: replace ``what`` rather than refuse."""
    return typer.Option("--force", help=f"Replace {what}.")


def diff_option(instead_of: str | None = None) -> Any:
    """--diff: what the command (or its ``instead_of`` flag) would change, as a patch, writing nothing."""
    changes = f"what {instead_of} would change" if instead_of else "the changes"
    return typer.Option("--diff", help=f"Show {changes} as a diff, write nothing.")


def report_format_option() -> Any:
    """--format for findings: text for people, json for programs, github for workflow annotations."""
    return typer.Option("--format", help="Report as text, json, or github (annotations in a GitHub Actions log).")


def table_format_option() -> Any:
    """--format for a measurement: a table for people, one JSON object for programs (bench, tune)."""
    return typer.Option("--format", help="Report as a table or one JSON object.")


def seed_option() -> Any:
    """--seed of what a measurement sends: its synthetic prompts and arrival times."""
    return typer.Option("--seed", help="Seed of the synthetic prompts and arrival times.")


def serving_python_option(when: str = "") -> Any:
    """--python: the interpreter the backend runs in, as launch picks it."""
    return typer.Option(
        "--python", help=_help(when, "the backend's Python, as for launch (default: $VLLM_REPO_SERVING_PYTHON).")
    )


def host_option(exposes: str) -> Any:
    """--host: the address to bind."""
    return typer.Option("--host", metavar="HOST", help=f"Address to bind (0.0.0.0 exposes {exposes}).")


def api_key_option(when: str = "", client: bool = False) -> Any:
    """--api-key, read from VLLM_API_KEY as vllm serve reads it: the same option for `openai` and `launch`, and for a
    ``client`` of the API (bench), the key it sends: the variable that set the server's key gives it too."""
    if client:
        text = "the key to send as `Authorization: Bearer KEY`, where the OpenAI API requires one."
    else:
        text = "require `Authorization: Bearer KEY` on /v1 (as vllm serve --api-key); repeat for several keys."
    return typer.Option("--api-key", envvar="VLLM_API_KEY", metavar="KEY", help=_help(when, text))


def cors_options(when: str = "") -> dict[str, Any]:
    """vllm serve's CORS options, for `openai` and `launch`: each list is JSON, as vllm serve takes it."""
    return {
        "allowed_origins": typer.Option(
            "--allowed-origins",
            metavar="JSON",
            help=_help(
                when,
                """origins whose pages may call the API, e.g. '["https://ui.example"]' or '["*"]' (default: none, """
                "as vllm serve).",
            ),
        ),
        "allow_credentials": typer.Option(
            "--allow-credentials", help=_help(when, "let those pages send cookies and authorization (as vllm serve).")
        ),
        "allowed_methods": typer.Option(
            "--allowed-methods", metavar="JSON", help=_help(when, """methods they may use (default '["*"]').""")
        ),
        "allowed_headers": typer.Option(
            "--allowed-headers", metavar="JSON", help=_help(when, """headers they may send (default '["*"]').""")
        ),
    }


# The load a measurement sends (bench, tune): the same options with the same meaning in both.
def slo_option(counted: str) -> Any:
    """--slo: the latency targets the goodput (``counted``) is counted against."""
    return typer.Option(
        "--slo",
        metavar="KEY=MS,...",
        help=f"Latency targets {counted}: ttft_p99_ms, itl_p99_ms, e2e_p99_ms, e.g. ttft_p99_ms=1000,itl_p99_ms=40.",
    )


def concurrency_option(default: int) -> Any:
    return typer.Option(
        "--concurrency", metavar="N,...", help=f"Requests in flight, one load point each (default {default})."
    )


def request_rate_option() -> Any:
    return typer.Option("--request-rate", metavar="R,...", help="Poisson arrivals per second, one load point each.")


def output_len_option() -> Any:
    return typer.Option("--output-len", help="Tokens generated per request, exactly (default 128, or the dataset's).")


def dataset_option() -> Any:
    return typer.Option(
        "--dataset",
        metavar="FILE.jsonl",
        help='Prompts instead of synthetic ones: {"prompt": ..., "output_tokens": N} a line (vLLM\'s custom dataset).',
    )
