"""Tokens/s and time to first token through Triton + the bundled backend, against raw AsyncLLM on the same engine
settings, at each concurrency of --concurrency (1 and 32 by default; 1,32,128,256,512 on the H200), alternating the
paths round by round (a shared machine is noisy).

Run by hand with the serving Python (vLLM; tritonclient for the gRPC client), from the repository root:

    eval "$(bash .ci/setup-serving.sh | sed 's/^/export /')"
    $VLLM_REPO_SERVING_PYTHON bench/backend_throughput.py [--rounds 5] [--tokens 64] [--clients http,grpc]

On a GPU host (VLLM_REPO_TRITON_HOME pointing at the unpacked nvidia-pytriton wheel):

    python bench/backend_throughput.py --device gpu --model M --engine-args '{"load_format": "dummy", ...}'

Triton side: a real Triton server (vllm_repo.serve.server) with the backend, one model instance. Clients:
- http: Triton's generate_stream endpoint through bench/http_stream.py, a lean asyncio client (one keep-alive
  connection per worker);
- grpc: tritonclient's gRPC aio streaming client, one stream per request.
Raw side: AsyncLLM in this process with the same engine arguments, consumed with DELTA outputs. Both engines stay
loaded for the whole run; only one is busy at a time. For each measurement above concurrency 1: CPU seconds per
process and per thread of the backend's stub (the load generator shares the machine's cores with the server, and its
own CPU shows whether it is the limit), and responses per request (what vLLM merged into one response).
--backend-variant NAME=DIR serves one more model with another backend directory, model.py and its package (e.g.
`git archive REV vllm_repo/backend | tar -x -C /tmp/REV`, then /tmp/REV/vllm_repo/backend) in the same server, driven
as triton_http_NAME: a before/after in one run; --once
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
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from http_stream import GenerateStreamConnection

# vLLM on a CPU: no thread pinning (the default pins to core 0), no extra worker process. Set before vLLM loads.
CPU_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
PROMPT = "The history of the printing press begins with"
# Words that each make one token in Llama-3's tokenizer and most others: --prompt-words N gives a prompt of about N.
FILLER = " the"
MODEL_NAME = "bench"


def default_engine_args(model: str, device: str) -> dict:
    if device == "cpu":
        return {
            "model": model,
            "dtype": "float32",
            "max_model_len": 1024,
            "kv_cache_memory_bytes": 128 * 2**20,
            "max_num_seqs": 64,
        }
    # Two engines share the GPU (Triton's and the raw one): each gets under half of it.
    return {"model": model, "max_model_len": 4096, "gpu_memory_utilization": 0.42}


# -- CPU accounting --------------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (command name, user+system CPU seconds so far), for every process."""
    from vllm_repo.serve.processes import process_table

    # stat fields after the name: utime and stime are the 12th and 13th.
    return {pid: (comm, (int(f[11]) + int(f[12])) / _TICK) for pid, comm, f in process_table()}


def thread_cpu_seconds(pids: list[int]) -> dict[str, float]:
    """'PID/thread name' -> CPU seconds so far, for every thread of ``pids`` (the backend names its engine loop and
    send threads in the OS); threads of one name in one process are summed."""
    seconds: dict[str, float] = collections.Counter()
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            name = stat[stat.find("(") + 1 : stat.rfind(")")]
            seconds[f"{pid}/{name}"] += (int(fields[11]) + int(fields[12])) / _TICK
    return seconds


def busiest_threads(before: dict, after: dict, wall: float, top: int = 6) -> dict[str, float]:
    """The threads that used the most CPU between two thread_cpu_seconds() readings, in CPU seconds per second."""
    used = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: round(v / wall, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1])[:top] if v > 0.005}


def cpu_used(before: dict, after: dict, labels: dict[int, str]) -> dict[str, float]:
    used: dict[str, float] = collections.Counter()
    for pid, (name, seconds) in after.items():
        delta = seconds - before.get(pid, (name, 0.0))[1]
        if delta > 0.005:
            used[labels.get(pid, name)] += delta
    return {k: round(v, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}


# -- request paths ---------------------------------------------------------------------------------------------------


def sampling_json(tokens: int) -> str:
    return json.dumps({"max_tokens": tokens, "ignore_eos": True})


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
        conn = self._idle.popleft() if self._idle else GenerateStreamConnection(self.host, self.port)
        try:
            first, events = await conn.generate(self.model, self.body)
        except BaseException:
            await conn.close()
            raise
        self._idle.append(conn)
        return first, sum(int(e["num_output_tokens"]) for e in events), len(events)

    async def close(self) -> None:
        while self._idle:
            await self._idle.popleft().close()


class GrpcPath:
    def __init__(self, url: str, tokens: int) -> None:
        import tritonclient.grpc.aio as grpcaio

        self.client = grpcaio.InferenceServerClient(url)
        self.tokens = tokens

    def _inputs(self):
        import numpy as np
        import tritonclient.grpc as grpcclient

        def tensor(name, array, datatype):
            t = grpcclient.InferInput(name, list(array.shape), datatype)
            t.set_data_from_numpy(array)
            return t

        return [
            tensor("text_input", np.array([PROMPT.encode()], dtype=np.object_), "BYTES"),
            tensor("stream", np.array([True]), "BOOL"),
            tensor("return_num_output_tokens", np.array([True]), "BOOL"),
            tensor("sampling_parameters", np.array([sampling_json(self.tokens).encode()], dtype=np.object_), "BYTES"),
        ]

    async def __call__(self) -> tuple[float, int, int]:
        async def requests():
            yield {"model_name": MODEL_NAME, "inputs": self._inputs()}

        start = time.perf_counter()
        first, count, responses = None, 0, 0
        stream = self.client.stream_infer(requests())
        try:
            async for result, error in stream:
                if error is not None:
                    raise RuntimeError(str(error))
                if first is None:
                    first = time.perf_counter() - start
                responses += 1
                count += int(result.as_numpy("num_output_tokens")[0])
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    break
        finally:
            stream.cancel()
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


class _StopReading(Exception):
    pass


async def check_cancellation(server, max_tokens: int) -> dict:
    """Close an HTTP generate_stream connection after three responses; the backend must abort the request in the
    engine (it logs that when it sees Triton's cancellation)."""
    marker = "cancelled by the client: aborted in the engine"
    already = server.log_text().count(marker)
    seen = []

    def on_event(event):
        seen.append(event)
        if len(seen) == 3:
            raise _StopReading

    conn = GenerateStreamConnection(server.host, server.http_port)
    body = {"text_input": PROMPT, "stream": True, "sampling_parameters": sampling_json(max_tokens)}
    try:
        await conn.generate(MODEL_NAME, body, on_event=on_event)
    except _StopReading:
        pass
    closed = time.perf_counter()
    await conn.close()
    while server.log_text().count(marker) == already:
        if time.perf_counter() - closed > 10:
            return {"aborted": False, "responses_before_close": len(seen)}
        await asyncio.sleep(0.01)
    return {
        "aborted": True,
        "responses_before_close": len(seen),
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


def build_tiny_model(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"), str(dest)], check=True, capture_output=True
    )
    return dest


def write_model(
    repo: Path,
    settings: dict,
    kind: str,
    name: str = MODEL_NAME,
    parameters: dict[str, str] | None = None,
    backend: str = "vllm",
) -> None:
    (repo / name / "1").mkdir(parents=True)
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (parameters or {}).items()
    )
    (repo / name / "config.pbtxt").write_text(
        f'backend: "{backend}"\ninstance_group [ {{ count: 1, kind: {kind} }} ]\n{params}'
    )
    (repo / name / "1" / "model.json").write_text(json.dumps(settings))


def gpu_memory_used() -> list[str]:
    """nvidia-smi's per-GPU memory in use (which GPUs Triton's engine landed on)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"nvidia-smi: {exc}"]
    return [line.strip() for line in out.splitlines() if line.strip()]


def summarize(rounds: dict) -> dict:
    """Medians over rounds per path; beside raw, each path's per-round ratios (a round's paths ran back to back) and
    their median, and the added median TTFT."""
    summary = {}
    for key, by_path in rounds.items():
        med: dict = {
            name: {
                field: statistics.median(r[field] for r in runs)
                for field in (
                    "tokens_per_s",
                    "ttft_median_ms",
                    "ttft_p90_ms",
                    "responses_per_request",
                    "server_cpu_s_per_s",
                    "client_cpu_s_per_s",
                )
                if all(r.get(field) is not None for r in runs)
            }
            for name, runs in by_path.items()
            if runs
        }
        raw = by_path.get("raw") or []
        for name, runs in by_path.items():
            if name == "raw" or not raw or not runs:
                continue
            # A path measured in the first rounds only (--once) is set against raw's same rounds.
            pairs = zip(runs, raw[: len(runs)], strict=True)
            ratios = [round(r["tokens_per_s"] / b["tokens_per_s"], 3) for r, b in pairs]
            med[f"{name}_over_raw_per_round"] = ratios
            med[f"{name}_over_raw_throughput"] = round(statistics.median(ratios), 3)
            med[f"{name}_added_ttft_ms"] = round(med[name]["ttft_median_ms"] - med["raw"]["ttft_median_ms"], 2)
        summary[key] = med
    return summary


def stub_pids(server_pids: list[int]) -> dict[str, int]:
    """Model name -> pid of the backend stub that serves it (its command line names the model's model.py)."""
    stubs = {}
    for pid in server_pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"triton_python_backend_stub") or len(argv) < 2:
            continue
        # argv[1]: <repository>/<model>/<version>/model.py
        stubs[Path(argv[1].decode()).parents[1].name] = pid
    return stubs


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument(
        "--instance-kind",
        choices=("KIND_CPU", "KIND_GPU", "KIND_MODEL"),
        help="instance_group kind (default: KIND_CPU on the CPU, KIND_GPU on a GPU); KIND_MODEL with "
        "tensor_parallel_size > 1 in --engine-args spreads one instance over several GPUs",
    )
    parser.add_argument("--model", help="model directory (default on the CPU: a tiny model built offline)")
    parser.add_argument("--engine-args", default="{}", help="JSON merged over the default engine arguments")
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
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    global PROMPT
    PROMPT += FILLER * args.prompt_words
    env = dict(OFFLINE_ENV, **(CPU_ENV if args.device == "cpu" else {}))
    os.environ.update(env)

    from vllm_repo.serve.server import TritonServer

    work = Path(tempfile.mkdtemp(prefix="backend-bench-"))
    if args.model is None and args.device == "gpu":
        parser.error("--model is required with --device gpu")
    model_dir = args.model or str(build_tiny_model(work / "tiny-llama"))
    metrics_on = args.metrics == "on"
    settings = dict(
        default_engine_args(model_dir, args.device),
        disable_log_stats=not metrics_on,
        **json.loads(args.engine_args),
    )
    repo = work / "repo"
    kind = args.instance_kind or ("KIND_CPU" if args.device == "cpu" else "KIND_GPU")
    # The model as init writes it: vLLM's metrics on Triton's metrics port (or, --metrics off, not asked for).
    base_parameters = {"REPORT_CUSTOM_METRICS": "true"} if metrics_on else {}
    write_model(repo, settings, kind, parameters={**base_parameters, **json.loads(args.parameters)})
    variants = json.loads(args.variants)
    for name, parameters in variants.items():
        write_model(repo, settings, kind, name=f"{MODEL_NAME}_{name}", parameters={**base_parameters, **parameters})
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
                repo, settings, kind, name=f"{MODEL_NAME}_{name}", parameters=base_parameters, backend=f"vllm_{name}"
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

    server = TritonServer(
        repo,
        serving_python=sys.executable,
        triton_home=os.environ["VLLM_REPO_TRITON_HOME"],
        env=env,
        log_path=work / "tritonserver.log",
        backend_directory=backend_directory,
        # One model at a time: engines profiling GPU memory side by side disturb each other.
        extra_args=["--model-load-thread-count=1"],
    )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    results: dict = {
        "device": args.device,
        "instance_kind": kind,
        "metrics": args.metrics,
        "model_parameters": {**base_parameters, **json.loads(args.parameters)},
        "variants": variants,
        "engine_args": settings,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "tokens_per_request": args.tokens,
        "clients": clients,
        "backend_variants": args.backend_variant,
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
        server_pids = _process_group(server.pgid)
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
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
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
            result = loop.run_until_complete(measure(paths[name], c, per))
            after = cpu_seconds_by_process()
            if c > 1:
                result["cpu_s"] = cpu_used(before, after, labels)
                busy = sum(after[p][1] - before.get(p, ("", 0.0))[1] for p in set(own) if p in after)
                result["server_cpu_s_per_s"] = round(busy / result["wall_s"], 3)
                # The load generator (this process, which is also raw's frontend): under 1 core, it is not the limit.
                if stub:
                    mine = after[os.getpid()][1] - before.get(os.getpid(), ("", 0.0))[1]
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
            order = names[i % len(names) :] + names[: i % len(names)]
            for c, per in plan:
                for name in order:
                    if i > 0 and name in once:
                        continue
                    result = run_one(name, c, per)
                    rounds[f"c{c}"][name].append(result)
                    print(f"round {i} c={c} {name:12s} {result}", flush=True)
            # What was measured so far stays if the run is cut short (a device's time running out).
            partial = dict(results, rounds=rounds, complete_rounds=i + 1)
            (out / f"backend_throughput_{args.device}_{stamp}.partial.json").write_text(json.dumps(partial, indent=1))
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
        (out / f"backend_throughput_{args.device}_{stamp}.json").write_text(json.dumps(results, indent=1))
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
        (out / f"backend_throughput_{args.device}_{stamp}.json").write_text(json.dumps(results, indent=1))
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


def children_of(pid: int) -> list[int]:
    """Every process below ``pid``: its EngineCore, and a backend's own helper processes with theirs."""
    from vllm_repo.serve.processes import process_table

    parents = {child: int(fields[1]) for child, _, fields in process_table()}  # fields: state, ppid, ...
    found, frontier = [], [pid]
    while frontier:
        below = [child for child, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def _process_group(pgid: int | None) -> list[int]:
    from vllm_repo.serve.processes import process_group_members

    return process_group_members(pgid) if pgid else []


if __name__ == "__main__":
    sys.exit(main())
