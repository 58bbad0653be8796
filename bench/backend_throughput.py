"""Tokens/s and time to first token through Triton + the bundled backend, against raw AsyncLLM on the same engine
settings, at concurrency 1 and 32, alternating the two round by round (a shared machine is noisy).

Run by hand with the serving Python (vLLM + tritonclient), from the repository root:

    eval "$(bash .ci/setup-serving.sh | sed 's/^/export /')"
    $VLLM_REPO_SERVING_PYTHON bench/backend_throughput.py [--rounds 3] [--tokens 64] [--out bench/results]

Triton side: a real Triton server (vllm_repo.triton_server) with the backend, driven by tritonclient's gRPC aio
streaming client (one stream per request, like a serving frontend). Raw side: AsyncLLM in this process with the same
engine arguments, consumed with DELTA outputs. Both engines are loaded for the whole run; only one is busy at a time.
Targets on a 2-core machine: >= 0.8x raw throughput at concurrency 32, <= 2 ms added median TTFT at concurrency 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# vLLM on a CPU: no thread pinning (the default pins to core 0), no extra worker process. Set before vLLM loads.
CPU_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}
PROMPT = "The history of the printing press begins with"


def engine_args(model: str) -> dict:
    return {
        "model": model,
        "dtype": "float32",
        "max_model_len": 1024,
        "kv_cache_memory_bytes": 128 * 2**20,
        "max_num_seqs": 64,
        "distributed_executor_backend": "uni",
        "disable_log_stats": True,
    }


# -- Triton side ---------------------------------------------------------------------------------------------------


def triton_inputs(tokens: int):
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
        tensor("sampling_parameters",
               np.array([json.dumps({"max_tokens": tokens, "ignore_eos": True}).encode()], dtype=np.object_),
               "BYTES"),
    ]


async def triton_request(client, model: str, tokens: int) -> tuple[float, int]:
    async def requests():
        yield {"model_name": model, "inputs": triton_inputs(tokens)}

    start = time.perf_counter()
    first, count = None, 0
    stream = client.stream_infer(requests())
    try:
        async for result, error in stream:
            if error is not None:
                raise RuntimeError(str(error))
            if first is None:
                first = time.perf_counter() - start
            count += int(result.as_numpy("num_output_tokens")[0])
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                break
    finally:
        stream.cancel()
    return first, count


# -- raw side ------------------------------------------------------------------------------------------------------


async def raw_request(engine, tokens: int) -> tuple[float, int]:
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    params = SamplingParams(max_tokens=tokens, ignore_eos=True, output_kind=RequestOutputKind.DELTA)
    start = time.perf_counter()
    first, count = None, 0
    async for out in engine.generate({"prompt": PROMPT}, params, uuid.uuid4().hex):
        if first is None:
            first = time.perf_counter() - start
        count += len(out.outputs[0].token_ids)
    return first, count


async def measure(one_request, concurrency: int, per_worker: int) -> dict:
    async def worker():
        return [await one_request() for _ in range(per_worker)]

    start = time.perf_counter()
    stats = [s for w in await asyncio.gather(*(worker() for _ in range(concurrency))) for s in w]
    wall = time.perf_counter() - start
    tokens = sum(s[1] for s in stats)
    return {"tokens": tokens, "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1),
            "ttft_median_ms": round(statistics.median(s[0] for s in stats) * 1000, 2)}


def build_tiny_model(dest: Path) -> Path:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_model.py"), str(dest)], check=True,
                   capture_output=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model directory (default: a tiny model built offline)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--c1-requests", type=int, default=10)
    parser.add_argument("--c32-requests-per-stream", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    os.environ.update(CPU_ENV)

    from vllm_repo.triton_server import TritonServer

    work = Path(tempfile.mkdtemp(prefix="backend-bench-"))
    model_dir = args.model or str(build_tiny_model(work / "tiny-llama"))
    settings = engine_args(model_dir)
    repo = work / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    (repo / "tiny" / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { kind: KIND_CPU } ]\n')
    (repo / "tiny" / "1" / "model.json").write_text(json.dumps(settings))

    server = TritonServer(repo, serving_python=sys.executable, triton_home=os.environ["VLLM_REPO_TRITON_HOME"],
                          env=CPU_ENV, log_path=work / "tritonserver.log")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    results: dict = {"engine_args": settings, "host": platform.node(), "cpus": os.cpu_count(),
                     "tokens_per_request": args.tokens}
    server.start()
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        async def make_engine():
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**settings))

        engine = loop.run_until_complete(make_engine())
        server.wait_ready(timeout=900)
        import tritonclient.grpc.aio as grpcaio

        client = grpcaio.InferenceServerClient(server.grpc_url)
        paths = {
            "raw": lambda: raw_request(engine, args.tokens),
            "triton": lambda: triton_request(client, "tiny", args.tokens),
        }
        # Warm-up: first requests pay one-off costs on both sides.
        for fn in paths.values():
            loop.run_until_complete(measure(fn, 4, 2))
        plan = ((1, 1, args.c1_requests), (32, 32, args.c32_requests_per_stream))
        rounds = {f"c{c}": {"raw": [], "triton": []} for c, _, _ in plan}
        for i in range(args.rounds):
            for c, concurrency, per in plan:
                order = ("raw", "triton") if i % 2 == 0 else ("triton", "raw")
                for name in order:
                    result = loop.run_until_complete(measure(paths[name], concurrency, per))
                    rounds[f"c{c}"][name].append(result)
                    print(f"round {i} c={c} {name:6s} {result}", flush=True)
        loop.run_until_complete(client.close())
        summary = {}
        for key, by_path in rounds.items():
            med = {name: {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
                          "ttft_median_ms": statistics.median(r["ttft_median_ms"] for r in runs)}
                   for name, runs in by_path.items()}
            med["triton_over_raw_throughput"] = round(med["triton"]["tokens_per_s"] / med["raw"]["tokens_per_s"], 3)
            med["added_ttft_ms"] = round(med["triton"]["ttft_median_ms"] - med["raw"]["ttft_median_ms"], 2)
            summary[key] = med
        results.update(rounds=rounds, summary=summary)
        print(json.dumps(summary, indent=1))
        engine.shutdown()
    finally:
        server.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (out / f"backend_throughput_cpu_{stamp}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
