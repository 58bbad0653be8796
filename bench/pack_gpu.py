"""Three engines on one GPU: `plan --pack`'s repository served by Triton with the bundled backend, and the same three
models started the ways people start them by hand (bench/results/pack.md). Run by hand on a GPU machine, with the
serving Python (vLLM, numpy<2) as the interpreter and VLLM_REPO_TRITON_HOME pointing at Triton's files:

    python -m bench.pack_gpu --models /tmp/m --kit .gpuroute/remote --out OUT [--starts 3] [--load-seconds 120]

--kit is the directory of the GPU bundle's make_model.py: it writes each model's config.json and tokenizer (no
weights: load_format "dummy"). What it does, each step's figures going into OUT/pack_gpu.json:

1. writes a repository of three models (a Llama-3-8B, a Qwen2.5-7B and a Qwen2.5-1.5B shape) and packs it with
   vllm_repo.scaffold.plan.plan_repository(pack=True) onto GPU 0, for ``--concurrency`` sequences each;
2. starts Triton on it ``--starts`` times, the models loading in parallel (Triton's default), and reads per model the
   KV cache the backend logs once its engine is up, vLLM's own KV cache lines and every out-of-memory line, while
   nvidia-smi's memory.used is sampled every 200 ms; in the first start, ``--streams`` streams per model for
   ``--load-seconds`` seconds, every request checked;
3. starts the same three models naively: with vLLM's default gpu_memory_utilization each, and with fractions
   written by hand (``--hand-fractions``), loading in parallel.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from vllm_repo.serve.errors import InferError
from vllm_repo.serve.triton_client import GenerateStreamConnection

from .lib.triton_bench import read_stream, triton_server

# Triton model name -> the bundle's preset (make_model.py) whose shape it has.
MODELS = {"llama8b": "llama3-8b", "qwen7b": "qwen2.5-7b", "qwen1_5b": "qwen2.5-1.5b"}
# Qwen2.5-1.5B's published shape: not one of the bundle's presets.
QWEN_1_5B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "sliding_window": 131072,
    "max_window_layers": 21,
    "bos_token_id": 0,
    "eos_token_id": 1,
}
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1"}
PROMPT = "Describe the harbour at dawn in plain words. " + "and the boats come home " * 24

READY = re.compile(r"\[vllm\] model (\S+) ready \(vLLM [^)]*\); KV cache (\d+) tokens \((\d+) blocks of (\d+)\)")
VLLM_KV_GIB = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
VLLM_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
FAILURES = re.compile(
    r"CUDA out of memory|OutOfMemoryError|Free memory on device|No available memory for the cache blocks|"
    r"failed to load|larger than the available KV cache memory"
)


def make_models(base: Path, kit: Path) -> dict[str, Path]:
    """The models' directories (config.json and tok/), written with the bundle's make_model.py where missing."""
    # The bundle's script, loaded from its file (it is no module of this tree).
    spec = importlib.util.spec_from_file_location("make_model", kit / "make_model.py")
    assert spec is not None and spec.loader is not None
    make_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_model)

    make_model.PRESETS.setdefault("qwen2.5-1.5b", QWEN_1_5B)
    dirs = {}
    for name, preset in MODELS.items():
        path = base / preset
        if not (path / "config.json").is_file():
            make_model.main(str(path), preset)
        dirs[name] = path
    return dirs


def write_repository(repo: Path, dirs: dict[str, Path], max_model_len: int, fractions: dict[str, float]) -> None:
    if repo.exists():
        shutil.rmtree(repo)
    for name, path in dirs.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            'backend: "vllm"\nmodel_transaction_policy { decoupled: true }\n'
            "instance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n"
        )
        args = {"model": str(path), "tokenizer": str(path / "tok"), "load_format": "dummy"}
        args["max_model_len"] = max_model_len
        if name in fractions:
            args["gpu_memory_utilization"] = fractions[name]
        (repo / name / "1" / "model.json").write_text(json.dumps(args, indent=2) + "\n")


def pack(repo: Path, concurrency: int, vllm_version: str, margin_gib: float | None) -> dict:
    """plan --pack on the repository, written; what it planned per engine."""
    from vllm_repo.scaffold.plan import plan_repository

    planned = plan_repository(repo, "H200", 1, concurrency, vllm_version=vllm_version, pack=True, margin_gib=margin_gib)
    for path, (_, new) in planned.changes.items():
        path.write_text(new)
    (gpu,) = planned.packed
    return {
        "explain": planned.explain(concurrency),
        "absolute": planned.absolute,
        "total_bytes": gpu.total_bytes,
        "margin_bytes": gpu.margin_bytes,
        "left_bytes": gpu.left_bytes,
        "engines": {
            e.name: {
                "kv_cache_memory_bytes": e.kv_bytes,
                "gpu_memory_utilization": e.gpu_memory_utilization,
                "fixed_bytes": e.cost.fixed_bytes,
                "footprint_bytes": e.footprint_bytes,
                "kv_cache_tokens": e.estimate.kv_cache_tokens,
                "max_concurrency": e.estimate.max_concurrency,
            }
            for e in gpu.engines
        },
    }


class MemorySampler:
    """nvidia-smi's memory.used of GPU 0 every 200 ms, in a process of its own, while a start runs."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self.total_mib: int | None = None
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def __enter__(self) -> MemorySampler:
        query = ["nvidia-smi", "-i", "0", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]
        self._process = subprocess.Popen([*query, "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                used, total = (int(x) for x in line.split(","))
            except ValueError:
                continue
            self.total_mib = total
            self.samples.append((round(time.monotonic() - self._t0, 2), used))

    def __exit__(self, *exc) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)

    def summary(self) -> dict:
        used = [u for _, u in self.samples]
        return {
            "peak_mib": max(used, default=None),
            "total_mib": self.total_mib,
            "samples": len(used),
            "trace_every_1s": self.samples[::5],
        }


def read_log(text: str) -> dict:
    ready = {m[1]: {"kv_tokens": int(m[2]), "blocks": int(m[3]), "block_size": int(m[4])} for m in READY.finditer(text)}
    return {
        "ready": ready,
        "vllm_available_kv_gib": [float(x) for x in VLLM_KV_GIB.findall(text)],
        "vllm_kv_tokens": [int(x.replace(",", "")) for x in VLLM_KV_TOKENS.findall(text)],
        "failures": [line.strip()[:400] for line in text.splitlines() if FAILURES.search(line)][:20],
    }


async def _stream(conn: GenerateStreamConnection, model: str, tokens: int) -> int:
    body = {
        "text_input": PROMPT,
        "stream": True,
        "return_num_output_tokens": True,
        "sampling_parameters": json.dumps({"max_tokens": tokens, "ignore_eos": True}),
    }
    return (await read_stream(conn, model, body)).tokens


async def load(host: str, port: int, models: list[str], streams: int, seconds: float, tokens: int) -> dict:
    """``streams`` workers per model, each sending requests one after another until ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    stats = {m: {"requests": 0, "failed": 0, "short": 0, "tokens": 0, "errors": []} for m in models}

    async def worker(model: str) -> None:
        conn = GenerateStreamConnection(f"http://{host}:{port}")
        try:
            while time.monotonic() < deadline:
                try:
                    got = await _stream(conn, model, tokens)
                except (InferError, OSError, asyncio.IncompleteReadError) as exc:
                    stats[model]["failed"] += 1
                    if len(stats[model]["errors"]) < 5:
                        stats[model]["errors"].append(str(exc)[:300])
                    await conn.close()
                    continue
                stats[model]["requests"] += 1
                stats[model]["tokens"] += got
                stats[model]["short"] += got != tokens
        finally:
            await conn.close()

    started = time.monotonic()
    await asyncio.gather(*(worker(m) for m in models for _ in range(streams)))
    elapsed = time.monotonic() - started
    for s in stats.values():
        s["tokens_per_s"] = round(s["tokens"] / elapsed, 1)
    return {"seconds": round(elapsed, 1), "streams_per_model": streams, "tokens_per_request": tokens, "models": stats}


def start(repo: Path, label: str, work: Path, args: argparse.Namespace, load_seconds: float = 0) -> dict:
    """One server start on ``repo``: what loaded, the KV caches, the memory peak, and the load when asked."""
    log_path = work / f"{label}.log"
    extra = ["--model-load-thread-count=1"] if args.sequential else []
    server = triton_server(repo, ENV, log_path, extra)
    result: dict = {"label": label}
    with MemorySampler() as memory:
        began = time.monotonic()
        server.start()
        try:
            deadline = began + args.load_timeout
            while time.monotonic() < deadline and server.is_running() and not server.is_ready():
                time.sleep(0.5)
            result["ready"] = server.is_running() and server.is_ready()
            result["load_seconds"] = round(time.monotonic() - began, 1)
            result["models_ready"] = [m for m in MODELS if server.is_running() and server.model_ready(m)]
            ready = f"ready={result['ready']} {result['models_ready']}"
            print(f"{label}: {ready} in {result['load_seconds']} s", flush=True)
            if result["ready"] and load_seconds:
                result["load"] = asyncio.run(
                    load(server.host, server.http_port, list(MODELS), args.streams, load_seconds, args.tokens)
                )
                print(f"{label}: load {json.dumps(result['load'])[:600]}", flush=True)
            elif result["ready"]:
                result["smoke"] = asyncio.run(load(server.host, server.http_port, list(MODELS), 1, 0.1, 16))
        finally:
            result["exit_status"] = server.stop()
    result["memory"] = memory.summary()
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    result["log"] = read_log(text)
    shutil.copy(log_path, Path(args.out) / log_path.name) if log_path.exists() else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="/tmp/m", help="where the models' directories go")
    parser.add_argument("--kit", required=True, help="the GPU bundle's directory with make_model.py")
    parser.add_argument("--out", required=True)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32, help="sequences each packed engine must hold")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--margin-gib", type=float, default=None)
    parser.add_argument("--streams", type=int, default=32, help="streams per model under load")
    parser.add_argument("--load-seconds", type=float, default=120)
    parser.add_argument("--tokens", type=int, default=128, help="tokens per request under load")
    parser.add_argument("--load-timeout", type=float, default=420)
    parser.add_argument("--sequential", action="store_true", help="load the models one at a time")
    parser.add_argument("--hand-fractions", default='{"llama8b": 0.45, "qwen7b": 0.35, "qwen1_5b": 0.12}')
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out: packed, default, hand")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update(ENV)
    import vllm

    skip = set(filter(None, args.skip.split(",")))
    work = Path(tempfile.mkdtemp(prefix="pack-gpu-"))
    dirs = make_models(Path(args.models), Path(args.kit))
    results: dict = {
        "host": platform.node(),
        "vllm": vllm.__version__,
        "gpu": subprocess.run(
            ["nvidia-smi", "-i", "0", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "args": vars(args),
    }

    def save() -> None:
        (out / "pack_gpu.json").write_text(json.dumps(results, indent=1) + "\n")

    if "packed" not in skip:
        repo = work / "packed"
        write_repository(repo, dirs, args.max_model_len, {})
        results["plan"] = pack(repo, args.concurrency, vllm.__version__, args.margin_gib)
        print("\n".join(results["plan"]["explain"]), flush=True)
        shutil.copytree(repo, out / "packed_repository", dirs_exist_ok=True)
        results["packed"] = []
        for k in range(args.starts):
            results["packed"].append(start(repo, f"packed-{k + 1}", work, args, args.load_seconds if k == 0 else 0))
            save()
    if "default" not in skip:
        repo = work / "default"
        write_repository(repo, dirs, args.max_model_len, {})
        results["default_fractions"] = start(repo, "default-fractions", work, args)
        save()
    if "hand" not in skip:
        repo = work / "hand"
        write_repository(repo, dirs, args.max_model_len, json.loads(args.hand_fractions))
        results["hand_fractions"] = start(repo, "hand-fractions", work, args)
        save()
    save()
    print(f"results in {out / 'pack_gpu.json'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
