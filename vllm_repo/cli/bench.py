"""`vllm-repo bench`: options in, benchmark.bench (or bench_repository) out; the report on stdout."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from vllm_repo.cli.options import (
    api_key_option,
    concurrency_option,
    dataset_option,
    force_option,
    output_len_option,
    request_rate_option,
    seed_option,
    serving_python_option,
    slo_option,
    table_format_option,
)
from vllm_repo.errors import UsageError


class BenchFormat(str, Enum):
    text = "text"
    json = "json"


class Endpoint(str, Enum):
    native = "native"
    openai = "openai"
    openai_chat = "openai-chat"


def _numbers(option: str, text: str | None, kind: type) -> list | None:
    if text is None:
        return None
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(
            f"{option} '{text}' is not a comma-separated list of numbers", hint=f"e.g. {option} 1,8,32"
        ) from None
    if not values:
        raise UsageError(f"{option} is empty", hint=f"e.g. {option} 1,8,32")
    return values


def load_fields(
    ctx: typer.Context,
    concurrency: str | None,
    request_rate: str | None,
    num_prompts: int,
    input_len: int,
    output_len: int | None,
    dataset: Path | None,
) -> dict[str, Any]:
    """The load options of bench and tune, checked, as the keyword arguments of their specs."""
    input_len_given = getattr(ctx.get_parameter_source("input_len"), "name", "") == "COMMANDLINE"
    if dataset is not None and input_len_given:
        raise UsageError("--input-len is for synthetic prompts; a --dataset brings its own")
    if concurrency and request_rate:
        raise UsageError("give --concurrency or --request-rate, not both")
    return {
        "concurrency": _numbers("--concurrency", concurrency, int),
        "request_rates": _numbers("--request-rate", request_rate, float),
        "num_prompts": num_prompts,
        "input_len": input_len,
        "output_len": output_len,
        "dataset": dataset,
    }


def _given(ctx: typer.Context, name: str) -> bool:
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


# bench's options that are its own, one alias each (the shared ones come from cli/options.py).
RepoArgument = Annotated[
    Path | None,
    typer.Argument(help="A model repository to launch, measure and stop (instead of --url).", show_default=False),
]
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="The server: Triton's gRPC HOST:PORT for --endpoint native (default 127.0.0.1:8001), the OpenAI "
        "API's http://HOST:PORT otherwise (default http://127.0.0.1:9000).",
    ),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", help="The model to measure (with REPO: its only model by default).")
]
EndpointOption = Annotated[
    list[Endpoint] | None,
    typer.Option(
        "--endpoint",
        help="native: Triton's streaming gRPC (the default); openai: /v1/completions; openai-chat: "
        "/v1/chat/completions. With --compare, once for each of Triton's endpoints to measure.",
        show_default=False,
    ),
]
InputLenOption = Annotated[
    int, typer.Option("--input-len", help="Tokens per synthetic prompt (exact where the server tokenizes).")
]
PlotOption = Annotated[
    Path | None,
    typer.Option("--plot", metavar="FILE", help="Write latency against throughput, SLO drawn (.html or .svg)."),
]
OutputOption = Annotated[
    Path | None,
    typer.Option("--output", "-o", metavar="FILE", help="Write the report (in --format) to FILE, not stdout."),
]
ReadyTimeoutOption = Annotated[
    float, typer.Option("--ready-timeout", help="With REPO: seconds to wait for the models to load.")
]
CompareOption = Annotated[
    list[str] | None,
    typer.Option(
        "--compare",
        metavar="vllm-serve[,backend=DIR]",
        help="With REPO: measure the same load through vllm serve (model.json as its command line) and/or Triton "
        "with another backend directory, and report each side's ratio to vllm serve.",
    ),
]
RoundsOption = Annotated[
    int, typer.Option("--rounds", help="With --compare: rounds, the servers' order reversed in each next one.")
]
TogetherOption = Annotated[
    bool,
    typer.Option(
        "--together", help="With --compare: keep every server loaded at once (refused where they do not fit)."
    ),
]


def bench(
    ctx: typer.Context,
    repo: RepoArgument = None,
    url: UrlOption = None,
    model: ModelOption = None,
    endpoint: EndpointOption = None,
    concurrency: Annotated[str | None, concurrency_option(1)] = None,
    request_rate: Annotated[str | None, request_rate_option()] = None,
    num_prompts: Annotated[
        str,
        typer.Option(
            "--num-prompts", metavar="N[,N...]", help="Requests per load point, or one number for each load point."
        ),
    ] = "100",
    input_len: InputLenOption = 1024,
    output_len: Annotated[int | None, output_len_option()] = None,
    dataset: Annotated[Path | None, dataset_option()] = None,
    slo: Annotated[str | None, slo_option("for goodput")] = None,
    output_format: Annotated[BenchFormat, table_format_option()] = BenchFormat.text,
    plot: PlotOption = None,
    force: Annotated[bool, force_option("an existing --plot or --output file")] = False,
    seed: Annotated[int, seed_option()] = 0,
    warmup: Annotated[int, typer.Option("--warmup", help="Unmeasured requests sent first, one at a time.")] = 1,
    wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for the model to be ready first.")] = 0.0,
    api_key: Annotated[str | None, api_key_option("With an OpenAI endpoint: ", client=True)] = None,
    python: Annotated[Path | None, serving_python_option("With REPO: ")] = None,
    ready_timeout: ReadyTimeoutOption = 900.0,
    compare: CompareOption = None,
    rounds: RoundsOption = 1,
    together: TogetherOption = False,
    output: OutputOption = None,
) -> None:
    """Measure latency and throughput of MODEL at each load point (a running server at --url, or REPO launched)."""
    from vllm_repo.benchmark import BenchSpec, parse_slo
    from vllm_repo.benchmark.plot import check_output_path, check_plot_path

    if repo is None and not model:
        raise UsageError(
            "--model is required with --url", hint="e.g. vllm-repo bench --url 127.0.0.1:8001 --model my-model"
        )
    if repo is not None and url is not None:
        raise UsageError("give a repository to launch or --url of a running server, not both")
    if compare and repo is None:
        raise UsageError("--compare launches the servers itself: give a repository (bench REPO --compare ...)")
    if not compare and (rounds != 1 or together):
        raise UsageError("--rounds and --together are for --compare")
    endpoints = [e.value for e in endpoint or [Endpoint.native]]
    if not compare and len(endpoints) > 1:
        raise UsageError("one --endpoint at a time (several are for --compare)")
    counts = _numbers("--num-prompts", num_prompts, int) or [100]
    load = load_fields(ctx, concurrency, request_rate, counts[0], input_len, output_len, dataset)
    if len(counts) > 1:
        load["prompts_per_point"] = counts
    for path, check in ((plot, check_plot_path), (output, check_output_path)):
        if path is not None:
            check(path, force)
    spec = BenchSpec(
        model=model or "", endpoint=endpoints[0], url=url, **load, slo=parse_slo(slo), seed=seed, warmup=warmup,
        api_key=api_key, wait_s=wait,
    )  # fmt: skip
    launch = {"python": python, "ready_timeout": ready_timeout}
    if compare:
        chosen = endpoints if _given(ctx, "endpoint") else None
        run = _compare(repo, spec, compare, rounds, together, chosen, launch)
    else:
        run = _measure(repo, spec, launch)
    _emit(run.report(), output_format, output, plot)
    if run.interrupted:
        raise typer.Exit(130)


def _measure(repo: Path | None, spec: Any, launch: dict[str, Any]) -> Any:
    from vllm_repo.benchmark import bench as run_bench
    from vllm_repo.benchmark import bench_repository
    from vllm_repo.benchmark.report import TerminalProgress

    progress = TerminalProgress(sys.stderr)
    if repo is None:
        return run_bench(spec, progress)
    return bench_repository(repo, spec, progress=progress, out=sys.stderr, **launch)


def _compare(
    repo: Path | None,
    spec: Any,
    compare: list[str],
    rounds: int,
    together: bool,
    endpoints: list[str] | None,
    launch: dict[str, Any],
) -> Any:
    from vllm_repo.benchmark.compare import CompareSpec, compare_repository, parse_contenders
    from vllm_repo.benchmark.report import TerminalProgress

    assert repo is not None  # checked by bench()
    compare_spec = CompareSpec(parse_contenders(compare), rounds=rounds, together=together, endpoints=endpoints)
    return compare_repository(repo, spec, compare_spec, progress=TerminalProgress(sys.stderr), out=sys.stderr, **launch)


def _emit(report: dict[str, Any], output_format: BenchFormat, output: Path | None, plot: Path | None) -> None:
    """The report on stdout or in --output's file, and the plot in --plot's."""
    from vllm_repo.benchmark.output import report_text, write_plot
    from vllm_repo.benchmark.report import to_json
    from vllm_repo.files import write_atomic

    text = to_json(report) if output_format is BenchFormat.json else report_text(report)
    if output is None:
        typer.echo(text)
    else:
        write_atomic(output, text + "\n")
        typer.echo(f"report: {output}", err=True)
    if plot is not None and report["points"]:
        write_plot(plot, report)
        typer.echo(f"plot: {plot}", err=True)
