"""`vllm-repo tune`: options in, tune.tune out; the table (or JSON) on stdout, the diff and progress on stderr."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.bench import BenchFormat, _numbers, load_fields
from vllm_repo.cli.options import (
    concurrency_option,
    dataset_option,
    force_option,
    gpu_option,
    num_gpus_option,
    output_len_option,
    request_rate_option,
    seed_option,
    serving_python_option,
    slo_option,
    table_format_option,
)
from vllm_repo.errors import UsageError
from vllm_repo.tune.spec import DEFAULT_CONCURRENCY, TuneSpec


def tune(
    ctx: typer.Context,
    repo: Annotated[
        Path, typer.Argument(help="The model repository (it is copied; nothing of it changes without --write).")
    ],
    model: Annotated[
        str | None, typer.Option("--model", help="The model to tune (default: the repository's only one).")
    ] = None,
    slo: Annotated[str | None, slo_option("the goodput counts against")] = None,
    concurrency: Annotated[str | None, concurrency_option(DEFAULT_CONCURRENCY)] = None,
    request_rate: Annotated[str | None, request_rate_option()] = None,
    num_prompts: Annotated[
        int, typer.Option("--num-prompts", help="Requests per load point and candidate.")
    ] = TuneSpec.num_prompts,
    input_len: Annotated[int, typer.Option("--input-len", help="Tokens per synthetic prompt.")] = TuneSpec.input_len,
    output_len: Annotated[int | None, output_len_option()] = None,
    dataset: Annotated[Path | None, dataset_option()] = None,
    budget_minutes: Annotated[
        float | None,
        typer.Option("--budget-minutes", metavar="M", help="Wall time the tune may take, server start included."),
    ] = None,
    gpu: Annotated[
        str | None, gpu_option("to size the candidates for", "gpu in [tool.vllm-repo], else this host's")
    ] = None,
    num_gpus: Annotated[int | None, num_gpus_option("of the host, for tensor parallelism against instances")] = None,
    max_num_seqs: Annotated[
        str | None,
        typer.Option("--max-num-seqs", metavar="N,...", help="max_num_seqs values to try (default: from the load)."),
    ] = None,
    max_num_batched_tokens: Annotated[
        str | None,
        typer.Option(
            "--max-num-batched-tokens",
            metavar="N,...",
            help="max_num_batched_tokens values to try (default 1024-16384).",
        ),
    ] = None,
    switches: Annotated[
        str | None,
        typer.Option(
            "--switches",
            metavar="NAME,...",
            help="Switches to try: enable_prefix_caching, enable_chunked_prefill, cudagraph, or none (default: all).",
        ),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Write the winner into model.json (config.pbtxt) and tune.json beside it.")
    ] = False,
    output_format: Annotated[BenchFormat, table_format_option()] = BenchFormat.text,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", metavar="FILE", help="Write goodput against p99 latency (.html or .svg)."),
    ] = None,
    force: Annotated[bool, force_option("an existing --plot file")] = False,
    seed: Annotated[int, seed_option()] = TuneSpec.seed,
    grid: Annotated[
        bool,
        typer.Option(
            "--grid",
            help="Measure every candidate of the space instead of searching it (what a brute-force tuner does), "
            "to check the search against.",
        ),
    ] = TuneSpec.grid,
    confirm: Annotated[
        int,
        typer.Option(
            "--confirm",
            min=0,
            metavar="N",
            help="Measure the search's best again, for up to N candidates, and score each by the mean of its "
            "measurements (the best of single measurements is the luckiest; 0: take it as it is).",
        ),
    ] = TuneSpec.confirm,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Take the candidates the model's tune.json has measured (a run stopped by Ctrl-C or its budget, or a "
            "search before --grid) instead of measuring them again; the run's SLO, load and model.json must be the "
            "same.",
        ),
    ] = False,
    python: Annotated[Path | None, serving_python_option()] = None,
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", help="Seconds to wait for the server and each candidate to load.")
    ] = TuneSpec.ready_timeout,
    log: Annotated[Path | None, typer.Option("--log", metavar="FILE", help="Keep the server's log there.")] = None,
) -> None:
    """Find the engine settings that serve MODEL best under an SLO: candidates sized by the estimator, measured
    through Triton with bench, the Pareto front and the winner shown, and written with --write."""
    from vllm_repo.benchmark import parse_slo
    from vllm_repo.benchmark.plot import check_plot_path
    from vllm_repo.benchmark.report import TerminalProgress
    from vllm_repo.tune import tune as run_tune
    from vllm_repo.tune.report import to_json, to_text, write_plot
    from vllm_repo.tune.write import write as write_result

    if not slo:
        raise UsageError("tune needs --slo", hint="e.g. --slo ttft_p99_ms=1000,itl_p99_ms=40")
    load = load_fields(ctx, concurrency, request_rate, num_prompts, input_len, output_len, dataset)
    if plot is not None:
        check_plot_path(plot, force)
    chosen = None if switches is None else [s.strip() for s in switches.split(",") if s.strip() not in ("", "none")]
    spec = TuneSpec(
        repository=repo,
        slo=parse_slo(slo),
        model=model or "",
        **load,
        budget_minutes=budget_minutes,
        gpu=gpu,
        num_gpus=num_gpus,
        max_num_seqs=_numbers("--max-num-seqs", max_num_seqs, int),
        max_num_batched_tokens=_numbers("--max-num-batched-tokens", max_num_batched_tokens, int),
        switches=chosen,
        grid=grid,
        confirm=confirm,
        resume=resume,
        python=python,
        ready_timeout=ready_timeout,
        seed=seed,
        log_path=log,
    )
    result = run_tune(spec, say=lambda line: typer.echo(line, err=True), progress=TerminalProgress(sys.stderr))
    if write:
        written = write_result(result)
        if written.diff:
            typer.echo(written.diff, err=True, nl=False)
        for path in written.paths:
            typer.echo(f"wrote {path}", err=True)
    evidence = result.evidence
    typer.echo(to_json(evidence) if output_format is BenchFormat.json else to_text(evidence))
    if plot is not None and evidence.measured:
        write_plot(plot, evidence)
        typer.echo(f"plot: {plot}", err=True)
    if result.interrupted:
        raise typer.Exit(130)
