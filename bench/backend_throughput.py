"""Tokens/s and time to first token through Triton + the bundled backend, against raw AsyncLLM on the same engine
settings, at each concurrency of --concurrency (1 and 32 by default; 1,32,128,256,512 on the H200), alternating the
paths round by round (a shared machine is noisy).

Run by hand with the serving Python (vLLM; tritonclient for the gRPC client), from the repository root:

    eval "$(bash .ci/setup-serving.sh | sed 's/^/export /')"
    $VLLM_REPO_SERVING_PYTHON -m bench.backend_throughput [--rounds 5] [--tokens 64] [--clients http,grpc]

On a GPU host (VLLM_REPO_TRITON_HOME pointing at the unpacked nvidia-pytriton wheel):

    python -m bench.backend_throughput --device gpu --model M --engine-args '{"load_format": "dummy", ...}'

Triton side: a real Triton server (vllm_repo.serve.server) with the backend, one model instance. Clients:
- http: Triton's generate_stream endpoint through vllm_repo.serve.triton_client's lean asyncio client (one keep-alive
  connection per worker);
- grpc: Triton's gRPC streaming (vllm_repo.serve.triton_grpc), streams kept open, one request in flight on each.
Raw side: AsyncLLM in this process with the same engine arguments, consumed with DELTA outputs. Both engines stay
loaded for the whole run; only one is busy at a time. For each measurement above concurrency 1: CPU seconds per
process and per thread of the backend's stub (the load generator shares the machine's cores with the server, and its
own CPU shows whether it is the limit), and responses per request (what vLLM merged into one response).
--backend-variant NAME=DIR serves one more model with another backend directory, model.py and its package (e.g.
`git archive REV vllm_repo/backend | tar -x -C /tmp/REV`, then /tmp/REV/vllm_repo/backend) in the same server, driven
as triton_http_NAME, with the model's --parameters: a before/after in one run; --once
NAME,... measures those paths in the first round only. --py-spy-at C,... records each Triton path's stub with py-spy
(raw stacks per thread, idle included) in one more pass after the rounds, at those concurrencies.
Metrics: by default both sides run as `vllm-repo init` writes a model, which is what users run: config.pbtxt's
REPORT_CUSTOM_METRICS "true" with model.json's "disable_log_stats": false, and raw AsyncLLM with the same engine
arguments, so with vLLM's own stat loggers. --metrics off is the labelled variant: neither side records stats. Every
result file says which ("metrics").
Targets: on a 2-core machine >= 0.8x raw throughput at concurrency 32 and <= 2 ms added median TTFT at concurrency 1;
on an H200 with an 8B-shaped model >= 0.98x raw at 32, 128 and 256 streams, >= 0.95x at 512, median TTFT at 1 stream
within +1 ms of raw.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from vllm_repo.backend.vllm_repo_backend import hops
from vllm_repo.serve.triton_client import GenerateRequest, GenerateStreamConnection
from vllm_repo.serve.triton_grpc import TritonGrpc

from .lib.processes import (
    busiest_threads,
    children_of,
    cpu_seconds_by_process,
    cpu_seconds_of,
    cpu_used,
    process_group,
    stub_pids,
    thread_cpu_seconds,
)
from .lib.results import RESULTS, ResultFile
from .lib.rounds import STEADY_SPREAD, field_medians, per_round_ratios, round_order, spread
from .lib.tiny import ROOT
from .lib.triton_bench import (
    MODEL_NAME,
    add_server_options,
    gpu_memory_used,
    prepare,
    read_stream,
    sampling_json,
    write_model,
)
from .lib.triton_bench import PROMPT as BASE_PROMPT

PROMPT = BASE_PROMPT
# Words that each make one token in Llama-3's tokenizer and most others: --prompt-words N gives a prompt of about N.
FILLER = " the"


# -- request paths ---------------------------------------------------------------------------------------------------


class HttpPath:
    def __init__(self, host: str, port: int, tokens: int, model: str = MODEL_NAME) -> None:
        self.host, self.port, self.tokens, self.model = host, port, tokens, model
        self._idle: collections.deque[GenerateStreamConnection] = collections.deque()
        self.body = {
            "text_input": PROMPT,
            "stream": True,
            "return_num_output_tokens": True,
            "sampling_parameters": sampling_json(tokens),
        }

    async def __call__(self) -> tuple[float, int, int]:
        conn = self._idle.popleft() if self._idle else GenerateStreamConnection(f"http://{self.host}:{self.port}")
        try:
            read = await read_stream(conn, self.model, self.body)
        except BaseException:
            await conn.close()
            raise
        self._idle.append(conn)
        return read.first_s, read.tokens, read.responses

    async def close(self) -> None:
        while self._idle:
            await self._idle.popleft().close()


class GrpcPath:
    """Triton's gRPC streaming through vllm_repo.serve.triton_grpc: streams kept open, one request in flight on each."""

    def __init__(self, url: str, tokens: int) -> None:
        self.client = TritonGrpc(url)
        self.request = GenerateRequest(
            PROMPT,
            {"max_tokens": tokens, "ignore_eos": True},
            exclude_input_in_output=None,
            returned=("num_output_tokens",),
        )

    async def __call__(self) -> tuple[float, int, int]:
        start = time.perf_counter()
        first, count, responses = None, 0, 0
        async for response in self.client.generate_stream(MODEL_NAME, self.request):
            if first is None:
                first = response.received - start
            responses += 1
            count += response.num_output_tokens or 0
        return first, count, responses

    async def close(self) -> None:
        await self.client.close()


class RawPath:
    def __init__(self, engine, tokens: int) -> None:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        self.engine = engine
        self.params = SamplingParams(max_tokens=tokens, ignore_eos=True, output_kind=RequestOutputKind.DELTA)

    async def __call__(self) -> tuple[float, int, int]:
        start = time.perf_counter()
        first, count, responses = None, 0, 0
        async for out in self.engine.generate({"prompt": PROMPT}, self.params, uuid.uuid4().hex):
            if first is None:
                first = time.perf_counter() - start
            responses += 1
            count += len(out.outputs[0].token_ids)
        return first, count, responses

    async def close(self) -> None:
        pass


async def check_cancellation(server, max_tokens: int) -> dict:
    """Close an HTTP generate_stream connection after three responses; the backend must abort the request in the
    engine (it logs that when it sees Triton's cancellation)."""
    marker = "cancelled by the client: aborted in the engine"
    already = server.log_text().count(marker)
    conn = GenerateStreamConnection(f"http://{server.host}:{server.http_port}")
    body = {"text_input": PROMPT, "stream": True, "sampling_parameters": sampling_json(max_tokens)}
    read = await read_stream(conn, MODEL_NAME, body, close_after=3)
    closed = time.perf_counter()
    await conn.close()
    while server.log_text().count(marker) == already:
        if time.perf_counter() - closed > 10:
            return {"aborted": False, "responses_before_close": read.responses}
        await asyncio.sleep(0.01)
    return {
        "aborted": True,
        "responses_before_close": read.responses,
        "abort_logged_after_ms": round((time.perf_counter() - closed) * 1000, 1),
    }


async def measure(one_request, concurrency: int, per_worker: int) -> dict:
    async def worker():
        return [await one_request() for _ in range(per_worker)]

    start = time.perf_counter()
    stats = [s for w in await asyncio.gather(*(worker() for _ in range(concurrency))) for s in w]
    wall = time.perf_counter() - start
    short = [s[1] for s in stats if s[1] != stats[0][1]]
    if short:
        raise RuntimeError(f"requests got different token counts: {stats[0][1]} and {short[:5]}")
    tokens = sum(s[1] for s in stats)
    ttfts = [s[0] for s in stats]
    return {
        "tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_median_ms": round(statistics.median(s[0] for s in stats) * 1000, 2),
        "ttft_p90_ms": round(statistics.quantiles(ttfts, n=10)[-1] * 1000, 2) if len(ttfts) > 1 else None,
        "responses_per_request": round(sum(s[2] for s in stats) / len(stats), 1),
    }


# -- main ------------------------------------------------------------------------------------------------------------


SUMMARY_FIELDS = (
    "tokens_per_s",
    "ttft_median_ms",
    "ttft_p90_ms",
    "responses_per_request",
    "server_cpu_s_per_s",
    "client_cpu_s_per_s",
)


def summarize(rounds: dict) -> dict:
    """Medians over rounds per path; beside raw, how far raw's own rounds moved, each path's per-round ratios (a
    round's paths ran back to back) and their median, and the added median TTFT."""
    summary = {}
    for key, by_path in rounds.items():
        med: dict = {name: field_medians(runs, SUMMARY_FIELDS) for name, runs in by_path.items() if runs}
        raw = by_path.get("raw") or []
        if len(raw) > 1:
            med["raw_spread"] = spread(raw, "tokens_per_s")
        for name, runs in by_path.items():
            if name == "raw" or not raw or not runs:
                continue
            ratios = per_round_ratios(runs, raw, "tokens_per_s")
            med[f"{name}_over_raw_per_round"] = ratios.per_round
            med[f"{name}_over_raw_throughput"] = ratios.median
            med[f"{name}_added_ttft_ms"] = round(med[name]["ttft_median_ms"] - med["raw"]["ttft_median_ms"], 2)
        summary[key] = med
    return summary


def unsteady_baseline(summary: dict) -> str:
    """A line naming the load points where raw's own rounds moved further apart than STEADY_SPREAD: there the host,
    not the paths, set the figures, and a ratio's second decimal means little."""
    unsteady = [
        f"{key} ({point['raw_spread']:.2f})"
        for key, point in summary.items()
        if point.get("raw_spread", 0) > STEADY_SPREAD
    ]
    if not unsteady:
        return f"raw's own rounds within {STEADY_SPREAD * 100:.0f} % of each other at every load point"
    return (
        f"raw's own rounds moved more than {STEADY_SPREAD * 100:.0f} % apart at {', '.join(unsteady)}: "
        "the host did not hold raw's pace there, so ratios there cannot tell a 2 % difference"
    )


def start_py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen | None:
    """py-spy recording ``pid``'s threads (raw folded stacks, idle frames included) for ``seconds``, if installed."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.path.exists(exe):
        print("py-spy is not installed: no profile", flush=True)
        return None
    argv = [exe, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))), "--rate", "250"]
    # --subprocesses: ENGINE_PROCESS's engine process (and vLLM's EngineCore) are the stub's children.
    argv += ["--format", "raw", "--threads", "--idle", "--nonblocking", "--subprocesses", "--output", str(out)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(f"{out}.log", "w"))


def served_parameters(
    metrics_on: bool, parameters: dict[str, str], variants: dict[str, dict[str, str]], backend_variants: list[str]
) -> dict[str, dict[str, str]]:
    """The config.pbtxt parameters of each model the server loads, by name suffix ("" for the model itself): the
    model as init writes it (vLLM's metrics on Triton's metrics port, or with --metrics off not asked for) with
    --parameters on top; a --variants model changes only what it names, and a --backend-variant model takes the
    model's own (an A/B of two backends runs them with the same settings)."""
    model = {**({"REPORT_CUSTOM_METRICS": "true"} if metrics_on else {}), **parameters}
    served = {"": model, **{name: {**model, **own} for name, own in variants.items()}}
    served.update((variant.partition("=")[0], model) for variant in backend_variants)
    return served


def _variant_label(variant: str) -> str:
    """NAME=DIR as the results record it: DIR relative to the working directory, or its name where it lies outside,
    so that no path of the machine it ran on goes into a published result (backend_sha256 says which code it was)."""
    name, _, directory = variant.partition("=")
    relative = os.path.relpath(directory)
    return f"{name}={Path(directory).name if relative.startswith('..') else relative}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_server_options(parser, "model directory (default on the CPU: a tiny model built offline)")
    parser.add_argument(
        "--instance-kind",
        choices=("KIND_CPU", "KIND_GPU", "KIND_MODEL"),
        help="instance_group kind (default: KIND_CPU on the CPU, KIND_GPU on a GPU); KIND_MODEL with "
        "tensor_parallel_size > 1 in --engine-args spreads one instance over several GPUs",
    )
    parser.add_argument("--clients", default="http,grpc", help="Triton clients to drive: http, grpc or both")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", default="1,32", help="streams per measurement, e.g. 1,32,128,256,512")
    parser.add_argument(
        "--requests",
        default="10,3",
        help="per --concurrency entry: requests in a row at concurrency 1, requests per stream above it",
    )
    parser.add_argument("--paths", help="the paths to drive (default: all), e.g. raw,triton_http")
    parser.add_argument(
        "--backend-variant",
        action="append",
        default=[],
        metavar="NAME=DIR|FILE",
        help="one more model served by the backend in directory DIR (model.py and its package), or by a model.py FILE "
        "with this tree's package (triton_http_NAME), e.g. before=/tmp/before_backend",
    )
    parser.add_argument("--once", default="", help="paths measured in the first round only, e.g. triton_http_before")
    parser.add_argument("--prompt-words", type=int, default=0, help="a prompt of about this many tokens")
    parser.add_argument("--py-spy-at", default="", help="concurrencies at which to record the stubs with py-spy")
    parser.add_argument("--parameters", default="{}", help="config.pbtxt parameters of the model, as JSON")
    parser.add_argument(
        "--metrics",
        choices=("on", "off"),
        default="on",
        help='on (the default, as init writes a model): REPORT_CUSTOM_METRICS "true" and "disable_log_stats": false, '
        "raw AsyncLLM with vLLM's stat loggers; off: no stats on either side",
    )
    parser.add_argument(
        "--variants",
        default="{}",
        help='more models in the same server, e.g. {"inline": {"RESPONSE_SENDER_THREADS": "0"}}: '
        "each is driven over HTTP as triton_http_NAME (an A/B of backend settings)",
    )
    parser.add_argument(
        "--check-cancel",
        action="store_true",
        help="also close a stream mid-way over HTTP and wait for the backend to abort it",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    global PROMPT
    PROMPT += FILLER * args.prompt_words
    metrics_on = args.metrics == "on"
    bench = prepare(parser, args, "backend-bench-", stats=metrics_on)
    work, settings, repo = bench.work, bench.settings, bench.repo
    kind = args.instance_kind or ("KIND_CPU" if args.device == "cpu" else "KIND_GPU")
    variants = json.loads(args.variants)
    served = served_parameters(metrics_on, json.loads(args.parameters), variants, args.backend_variant)
    write_model(repo, settings, kind, parameters=served[""])
    for name in variants:
        write_model(repo, settings, kind, name=f"{MODEL_NAME}_{name}", parameters=served[name])
    backend_directory = None
    if args.backend_variant:
        from vllm_repo.serve.server_files import TritonHome, layout_backend_directory

        python_version = subprocess.run(
            [sys.executable, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        home = TritonHome(Path(os.environ["VLLM_REPO_TRITON_HOME"]))
        backend_directory = layout_backend_directory(work / "backends", home, python_version)
        for variant in args.backend_variant:
            name, _, source = variant.partition("=")
            variants[name] = {}
            write_model(
                repo, settings, kind, name=f"{MODEL_NAME}_{name}", parameters=served[name], backend=f"vllm_{name}"
            )
            # A backend directory (model.py with its package beside it), or a model.py alone, which then imports the
            # package of this tree's backend.
            target = backend_directory / f"vllm_{name}"
            if Path(source).is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copytree(ROOT / "vllm_repo" / "backend", target, ignore=shutil.ignore_patterns("__pycache__"))
                shutil.copy2(source, target / "model.py")

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if "grpc" in clients:
        try:
            import tritonclient.grpc.aio  # noqa: F401
        except ImportError:
            print("tritonclient is not installed: the gRPC client is left out", flush=True)
            clients.remove("grpc")

    # One model at a time: engines profiling GPU memory side by side disturb each other.
    server = bench.server(["--model-load-thread-count=1"], backend_directory)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    results: dict = {
        "device": args.device,
        "instance_kind": kind,
        "metrics": args.metrics,
        "model_parameters": served[""],
        "variants": variants,
        "engine_args": settings,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "tokens_per_request": args.tokens,
        "clients": clients,
        "backend_variants": [_variant_label(variant) for variant in args.backend_variant],
        # Which code served: the bundled model.py (or the one that replaced it) and each variant's.
        "backend_sha256": {
            name: backend_sha256(Path(source))
            for name, source in [
                ("bundled", ROOT / "vllm_repo" / "backend"),
                *(v.split("=", 1) for v in args.backend_variant),
            ]
        },
        "prompt_words": args.prompt_words,
    }
    server.start()
    engine = None
    try:
        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        results["vllm_version"] = vllm.__version__

        async def make_engine():
            # The same engine arguments: with metrics on, vLLM's own stat loggers record as they do in vllm serve.
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**settings))

        server.wait_ready(timeout=900)  # Triton's engine first: two engine startups at once starve each other
        if args.device == "gpu":
            results["gpu_memory_with_triton_loaded"] = gpu_memory_used()
        engine = loop.run_until_complete(make_engine())
        paths = {"raw": RawPath(engine, args.tokens)}
        if "http" in clients:
            paths["triton_http"] = HttpPath(server.host, server.http_port, args.tokens)
            for name in variants:
                paths[f"triton_http_{name}"] = HttpPath(
                    server.host, server.http_port, args.tokens, f"{MODEL_NAME}_{name}"
                )
        if "grpc" in clients:
            paths["triton_grpc"] = GrpcPath(server.grpc_url, args.tokens)
        if args.paths:
            wanted = {p.strip() for p in args.paths.split(",")}
            for name in [n for n in paths if n not in wanted]:
                loop.run_until_complete(paths.pop(name).close())
        labels = {os.getpid(): "bench process (client, raw engine frontend)"}
        names = cpu_seconds_by_process()
        server_pids = process_group(server.pgid)
        for pid in server_pids:
            labels[pid] = f"server group: {names.get(pid, ('?', 0))[0]}"
        stubs = stub_pids(server_pids)
        results["stub_pids"] = stubs
        # The raw path's server is this process (vLLM's frontend) and its EngineCore, the process's children.
        raw_server = [os.getpid(), *(p for p in children_of(os.getpid()) if p not in server_pids)]
        tritonserver = [p for p in server_pids if names.get(p, ("", 0))[0] == "tritonserver"]
        # Warm-up: first requests pay one-off costs on both sides.
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        per_entry = [int(n) for n in args.requests.split(",")]
        if len(per_entry) != len(concurrencies):
            parser.error("--requests needs one number per --concurrency entry")
        for path in paths.values():
            loop.run_until_complete(measure(path, max(concurrencies), 1))
        plan = list(zip(concurrencies, per_entry, strict=True))
        profile_at = {int(c) for c in args.py_spy_at.split(",") if c.strip()}
        result_file = ResultFile(args.out, f"backend_throughput_{args.device}")
        out, stamp = result_file.out, result_file.started
        out.mkdir(parents=True, exist_ok=True)
        names = list(paths)
        once = {n.strip() for n in args.once.split(",") if n.strip()}

        def run_one(name: str, c: int, per: int, spy_to: Path | None = None) -> dict:
            model = paths[name].model if isinstance(paths[name], HttpPath) else MODEL_NAME
            stub = stubs.get(model) if name != "raw" else None
            # Server side: tritonserver, the model's stub and the processes below it (its EngineCore); for raw, this
            # process (vLLM's frontend, and the client) and its EngineCore.
            own = [*tritonserver, stub, *children_of(stub)] if stub else raw_server
            spy = None
            if spy_to is not None and stub:
                # The duration is a guess at the measurement's length; the profile is cut where it ends.
                seconds = per * args.tokens * c / 4000 if c > 1 else per * args.tokens / 150
                spy = start_py_spy(stub, seconds, spy_to)
            before = cpu_seconds_by_process()
            threads_before = thread_cpu_seconds([stub] if stub else [])
            started = time.monotonic_ns()
            result = loop.run_until_complete(measure(paths[name], c, per))
            if hops.hop is not hops.off:  # bench.native_hops: the measurement's window among the backend's hops
                hops.hop("R", f"{name}:{c}:{per}", started)
                hops.hop("R", f"{name}:{c}:{per}")
                hops.flush()
            after = cpu_seconds_by_process()
            if c > 1:
                result["cpu_s"] = cpu_used(before, after, labels)
                result["server_cpu_s_per_s"] = round(cpu_seconds_of(before, after, own) / result["wall_s"], 3)
                # The load generator (this process, which is also raw's frontend): under 1 core, it is not the limit.
                if stub:
                    mine = cpu_seconds_of(before, after, [os.getpid()])
                    result["client_cpu_s_per_s"] = round(mine / result["wall_s"], 3)
                if stub:
                    result["stub_threads_cpu_s_per_s"] = busiest_threads(
                        threads_before, thread_cpu_seconds([stub]), result["wall_s"]
                    )
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes what it recorded and exits: the profile ends here
                spy.wait(timeout=120)
            return result

        rounds = {f"c{c}": {name: [] for name in names} for c, _ in plan}
        for i in range(args.rounds):
            order = round_order(names, i)
            for c, per in plan:
                for name in order:
                    if i > 0 and name in once:
                        continue
                    result = run_one(name, c, per)
                    rounds[f"c{c}"][name].append(result)
                    print(f"round {i} c={c} {name:12s} {result}", flush=True)
            # What was measured so far stays if the run is cut short (a device's time running out).
            partial = dict(results, rounds=rounds, complete_rounds=i + 1)
            result_file.write_partial(partial)
        profiles = {}
        for c, per in plan:
            if c not in profile_at:
                continue
            for name in names:
                if name != "raw":
                    spy_to = out / f"py_spy_{stamp}_{name}_c{c}.txt"
                    profiles[f"{name}_c{c}"] = dict(run_one(name, c, per, spy_to), profile=spy_to.name)
                    print(f"profiled c={c} {name:12s} {profiles[f'{name}_c{c}']}", flush=True)
        results["profiled_runs"] = profiles
        for path in paths.values():
            loop.run_until_complete(path.close())
        if args.check_cancel:
            results["cancel_http"] = loop.run_until_complete(check_cancellation(server, settings["max_model_len"] - 64))
            print("cancellation:", results["cancel_http"], flush=True)
        if metrics_on:
            results["metric_values_recorded"] = histogram_values_by_model(server.metrics_url)
        results.update(rounds=rounds, summary=summarize(rounds) if args.rounds else {})
        print(json.dumps(results["summary"], indent=1))
        print(unsteady_baseline(results["summary"]), flush=True)
        result_file.write(results)
    finally:
        if engine is not None:
            engine.shutdown()
        server.stop()
        results["backend_send_log"] = [
            line
            for line in server.log_text().splitlines()
            if "responses sent" in line or "finalized" in line or "metric calls" in line
        ]
    if "summary" in results:
        result_file.write(results)
    return 0


def histogram_values_by_model(metrics_url: str) -> dict[str, int]:
    """Per model, how many values its vLLM histograms hold (the sum of their _count series): with one call to the
    server per value, as Triton's own vLLM backend reports them, the round trips they took; the bundled backend logs
    its own calls at unload ("metric calls")."""
    import re
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=30) as response:
        text = response.read().decode()
    found: dict[str, int] = collections.Counter()
    for line in text.splitlines():
        match = re.match(r'vllm:\w+_count\{.*model="([^"]+)".*\} ([\d.e+]+)$', line)
        if match:
            found[match.group(1)] += int(float(match.group(2)))
    return dict(found)


def backend_sha256(source: Path) -> str:
    """One digest of the backend's Python files (model.py and its package), or of a model.py given alone."""
    files = sorted(source.rglob("*.py")) if source.is_dir() else [source]
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(source) if source.is_dir() else path.name).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
