"""The OpenAI gateway against `vllm serve` on one GPU, end to end in one process tree (bench/device_openai.sh runs it
on the device; it runs anywhere with vLLM, a GPU and the Triton server files).

1. A model repository with one model, NAME: the bundled backend (config.pbtxt, KIND_GPU, REPORT_CUSTOM_METRICS on,
   as vllm serve keeps its own stats on) and --engine-args as model.json.
2. A real Triton server on it (vllm_repo.serve.server.TritonServer, VLLM_REPO_TRITON_HOME), then the OpenAI gateway in
   front of its gRPC port (vllm_repo.serve.openai.run_gateway, a child process).
3. One chat request (it builds vLLM's OpenAI layer in the backend), then a cancellation check: a streamed chat
   request closed by the client after three chunks must leave vllm:num_requests_running at 0 on Triton's metrics
   port, and the backend must log the abort.
4. bench/openai_gateway.py with --in-process: it starts `python -m vllm.entrypoints.openai.api_server` on the same
   model and engine arguments and alternates `vllm bench serve` between the two.

    python -m bench.openai_gateway_device --model-dir DIR --tokenizer DIR/tok --out OUT \
        --engine-args '{"load_format": "dummy", "max_model_len": 4096, "gpu_memory_utilization": 0.42}'

Writes OUT/openai_gateway_gpu_<stamp>.json (the benchmark's results plus this run's setup and checks) and the logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

from vllm_repo.serve.ports import free_port
from vllm_repo.serve.server import TritonServer

from . import openai_gateway
from .lib.results import ResultFile
from .lib.tiny import OFFLINE_ENV, ROOT
from .lib.triton_bench import gpu_memory_used, triton_server, write_model
from .openai_hops import triton_trace_args

# The tokenizer make_model.py writes has no chat template; both servers read this one from tokenizer_config.json.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }} {% endfor %}{% if add_generation_prompt %}t3{% endif %}"
)
GATEWAY = """\
import sys
from vllm_repo.serve.openai import StreamSocketMode, print_ready, run_gateway
mode = StreamSocketMode(sys.argv[3])
sys.exit(run_gateway(sys.argv[1], port=int(sys.argv[2]), on_ready=print_ready, stream_socket=mode))
"""
STREAM_SOCKET_MARKER = "streamed OpenAI responses go to the gateway's socket"
# The same process environment for Triton's engine and vllm serve's (the tests' reference runs vLLM in process).
ENV = {**OFFLINE_ENV, "OMP_NUM_THREADS": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
ABORT_MARKER = "cancelled by the client: aborted in the engine"


def add_chat_template(tokenizer_dir: Path) -> None:
    path = tokenizer_dir / "tokenizer_config.json"
    config = json.loads(path.read_text())
    if "chat_template" not in config:
        config["chat_template"] = CHAT_TEMPLATE
        path.write_text(json.dumps(config))


def http_json(url: str, body: dict | None = None, timeout: float = 600) -> tuple[int, dict | str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def http_stream(url: str, body: dict, timeout: float = 600) -> bytes:
    """A streamed answer's bytes, whole."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return resp.read()


def wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 in {timeout:.0f} s")


def running_requests(metrics_url: str) -> float | None:
    """The sum of vllm:num_requests_running on Triton's metrics port (None when the metric is absent)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    values = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running")
    ]
    return sum(values) if values else None


async def check_cancellation(base_url: str, model: str, server: TritonServer, max_tokens: int) -> dict:
    """Stream a long chat completion, close the connection after three chunks, then poll the metrics port."""
    import aiohttp

    already = server.log_text().count(ABORT_MARKER)
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "t10 t11 t12 t13"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    chunks = 0
    running_while_streaming = None
    async with aiohttp.ClientSession() as session:
        resp = await session.post(f"{base_url}/chat/completions", json=body)
        status = resp.status
        async for line in resp.content:
            if line.startswith(b"data:"):
                chunks += 1
                if chunks == 3:
                    break
        # The backend reports its metrics every 50 ms: wait until the stream shows up as running.
        deadline = time.perf_counter() + 2
        while time.perf_counter() < deadline:
            running_while_streaming = await asyncio.to_thread(running_requests, server.metrics_url)
            if running_while_streaming:
                break
            await asyncio.sleep(0.02)
        closed = time.perf_counter()
        resp.close()  # drops the connection: the gateway's handler is cancelled, and with it the Triton stream
    result: dict = {
        "status": status,
        "chunks_before_close": chunks,
        "num_requests_running_while_streaming": running_while_streaming,
    }
    while time.perf_counter() - closed < 15:
        running = await asyncio.to_thread(running_requests, server.metrics_url)
        if running == 0 and "num_requests_running_zero_after_ms" not in result:
            result["num_requests_running_zero_after_ms"] = round((time.perf_counter() - closed) * 1000, 1)
        if server.log_text().count(ABORT_MARKER) > already and "abort_logged_after_ms" not in result:
            result["abort_logged_after_ms"] = round((time.perf_counter() - closed) * 1000, 1)
        if running is None:
            result["num_requests_running_zero_after_ms"] = None  # metrics off: only the backend's log tells
        if "num_requests_running_zero_after_ms" in result and "abort_logged_after_ms" in result:
            break
        await asyncio.sleep(0.01)
    result["aborted"] = "abort_logged_after_ms" in result and "num_requests_running_zero_after_ms" in result
    return result


# vLLM's benchmark client as `vllm bench serve` runs it, from its module (as tests/benchmark do where the CLI does not
# start).
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def agreement(root: str, args: argparse.Namespace, tokenizer: Path) -> dict:
    """`vllm-repo bench` and `vllm bench serve` one after the other on the same OpenAI endpoint and load, ``rounds``
    times: each round's output tokens/s and median TTFT from both, and the ratios."""
    import random

    concurrency = int(args.concurrency.split(",")[0])
    prompts = int((args.num_prompts or "320").split(",")[0])
    # make_model.py's vocabulary is "t<id>" words: English words are all its unknown token, and prompts of them would
    # be one sequence a prefix cache serves. Random ids, as vLLM's random dataset draws them, for bench too.
    vocab = json.loads((args.model_dir / "config.json").read_text())["vocab_size"]
    rounds = []
    for k in range(args.rounds):
        rng = random.Random(k)
        dataset = args.out / f"prompts_{k}.jsonl"
        dataset.write_text(
            "".join(
                json.dumps({"prompt": " ".join(f"t{rng.randrange(3, vocab)}" for _ in range(args.input_len))}) + "\n"
                for _ in range(prompts)
            )
        )
        ours = subprocess.run(
            [sys.executable, "-m", "vllm_repo", "bench", "--url", root, "--model", args.name, "--endpoint", "openai",
             "--concurrency", str(concurrency), "--num-prompts", str(prompts), "--dataset", str(dataset),
             "--output-len", str(args.output_len), "--seed", str(k), "--format", "json"],
            capture_output=True, text=True, cwd=str(ROOT), timeout=900,
        )  # fmt: skip
        if ours.returncode != 0:
            raise RuntimeError(f"vllm-repo bench failed: {ours.stderr[-3000:]}")
        (point,) = json.loads(ours.stdout)["points"]
        result = args.out / f"vllm_bench_serve_{k}.json"
        theirs = subprocess.run(
            [sys.executable, "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", root, "--endpoint",
             "/v1/completions", "--model", args.name, "--tokenizer", str(tokenizer), "--dataset-name", "random",
             "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
             "--num-prompts", str(prompts), "--max-concurrency", str(concurrency), "--ignore-eos", "--seed", str(k),
             "--save-result", "--result-dir", str(args.out), "--result-filename", result.name],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if theirs.returncode != 0:
            raise RuntimeError(f"vllm bench serve failed: {theirs.stdout[-2000:]} {theirs.stderr[-2000:]}")
        vllm_result = json.loads(result.read_text())
        row = {
            "vllm_repo_bench": {"output_tokens_per_s": point["output_tokens_per_s"],
                                "median_ttft_ms": point["ttft_ms"]["p50"], "failed": point["failed"],
                                "input_tokens_mean": point.get("input_tokens_mean")},
            "vllm_bench_serve": {"output_tokens_per_s": vllm_result["output_throughput"],
                                 "median_ttft_ms": vllm_result["median_ttft_ms"], "failed": vllm_result.get("failed"),
                                 "input_tokens_mean": vllm_result["total_input_tokens"] / vllm_result["completed"]},
        }  # fmt: skip
        row["throughput_ratio"] = row["vllm_repo_bench"]["output_tokens_per_s"] / vllm_result["output_throughput"]
        row["median_ttft_ratio"] = row["vllm_repo_bench"]["median_ttft_ms"] / vllm_result["median_ttft_ms"]
        print(f"agreement round {k}: {json.dumps(row)}", flush=True)
        rounds.append(row)
    return {"concurrency": concurrency, "num_prompts": prompts, "input_len": args.input_len,
            "output_len": args.output_len, "rounds": rounds}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, help="default: --model-dir")
    parser.add_argument("--name", default="llama3-8b", help="Triton's model name and vllm serve's served name")
    parser.add_argument("--engine-args", default="{}", help="JSON: both servers' engine arguments (model aside)")
    parser.add_argument("--out", type=Path, required=True, help="the results file and the servers' logs")
    parser.add_argument("--work", type=Path, default=Path("/tmp/openai-gateway-device"), help="the model repository")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,32,128")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--instance-kind", default="KIND_GPU")
    parser.add_argument(
        "--metrics",
        choices=("on", "off"),
        default="on",
        help="REPORT_CUSTOM_METRICS (on: as vllm serve keeps its stats; off: the cancellation check has no metric)",
    )
    parser.add_argument(
        "--parameters",
        default="{}",
        help='JSON: more config.pbtxt parameters of the model, e.g. {"ENGINE_PROCESS": "true"} (vLLM in a process of '
        "its own)",
    )
    parser.add_argument("--cancel-max-tokens", type=int, default=3000, help="the cancelled stream's max_tokens")
    parser.add_argument("--env", default="{}", help="JSON merged over both servers' environment")
    parser.add_argument(
        "--stream-socket",
        choices=("auto", "on", "off"),
        default="auto",
        help="the gateway's --stream-socket (auto: on, Triton is on this host; off: every byte through Triton)",
    )
    parser.add_argument("--max-seconds", type=float, help="start no benchmark round after this many seconds")
    parser.add_argument("--num-prompts", help="bench/openai_gateway.py's --num-prompts")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="bench/openai_gateway.py's --warmup-rounds")
    parser.add_argument(
        "--triton-trace",
        metavar="DIR",
        help="Triton writes a trace of every request there (timestamps; bench/openai_hops.py reads it)",
    )
    parser.add_argument(
        "--agreement",
        action="store_true",
        help="instead of the comparison with vllm serve: `vllm-repo bench` and `vllm bench serve` in turn on the "
        "gateway, at --concurrency's first value, --num-prompts (default 320) each, --rounds times; writes "
        "OUT/bench_agreement.json",
    )
    args = parser.parse_args(argv)
    parameters = json.loads(args.parameters)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = args.tokenizer or args.model_dir
    add_chat_template(tokenizer)
    settings = {"model": str(args.model_dir), "tokenizer": str(tokenizer), **json.loads(args.engine_args)}
    env = {**ENV, **json.loads(args.env)}
    os.environ.update(env)

    repo = args.work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    write_model(
        repo,
        settings,
        args.instance_kind,
        name=args.name,
        parameters={"REPORT_CUSTOM_METRICS": "true" if args.metrics == "on" else "false", **parameters},
    )
    setup: dict = {
        "metrics": args.metrics,
        "parameters": parameters,
        "stream_socket": args.stream_socket,
        "engine_args": settings,
        "env": env,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }
    trace = triton_trace_args(args.triton_trace) if args.triton_trace else []
    server = triton_server(repo, env, args.out / "tritonserver.log", trace)
    gateway = None
    started = time.monotonic()
    server.start()
    try:
        server.wait_ready(timeout=900)
        setup["triton_ready_s"] = round(time.monotonic() - started, 1)
        setup["gpu_memory_with_triton_loaded"] = gpu_memory_used()
        print("triton ready", setup["triton_ready_s"], setup["gpu_memory_with_triton_loaded"], flush=True)

        port = free_port("127.0.0.1")
        with open(args.out / "gateway.log", "ab") as log:
            gateway = subprocess.Popen(
                [sys.executable, "-c", GATEWAY, server.grpc_url, str(port), args.stream_socket],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(ROOT),
            )
        base_url = f"http://127.0.0.1:{port}/v1"
        setup["gateway_ready_s"] = round(wait_http(f"http://127.0.0.1:{port}/health", 60, gateway), 2)
        setup["gateway_models"] = http_json(f"{base_url}/models")[1]

        first = time.monotonic()
        status, answer = http_json(
            f"{base_url}/chat/completions",
            {"model": args.name, "messages": [{"role": "user", "content": "t5 t6 t7"}], "max_tokens": 8},
        )
        setup["first_chat"] = {"status": status, "s": round(time.monotonic() - first, 2), "answer": answer}
        streamed = http_stream(
            f"{base_url}/chat/completions",
            {"model": args.name, "messages": [{"role": "user", "content": "t5 t6"}], "max_tokens": 4, "stream": True},
        )
        setup["first_stream_events"] = streamed.count(b"data: ")
        setup["backend_used_stream_socket"] = STREAM_SOCKET_MARKER in server.log_text()
        print("first chat through the gateway:", json.dumps(setup["first_chat"])[:2000], flush=True)
        if status != 200:
            raise RuntimeError(f"the gateway answered {status}: {answer}")
        try:
            setup["cancellation"] = asyncio.run(check_cancellation(base_url, args.name, server, args.cancel_max_tokens))
        except Exception:
            setup["cancellation"] = {"error": traceback.format_exc()}
        print("cancellation:", setup["cancellation"], flush=True)

        bench_argv = [
            "--gateway-url",
            base_url,
            "--model",
            args.name,
            "--model-dir",
            str(args.model_dir),
            "--tokenizer",
            str(tokenizer),
            "--engine-args-only",
            "--engine-args",
            json.dumps({k: v for k, v in settings.items() if k != "model"}),
            "--serving-python",
            sys.executable,
            "--reference-env",
            json.dumps(env),
            "--reference-args",
            "",
            "--in-process",
            "--cpu-seconds",
            "--triton-url",
            server.http_url,
            "--label-group",
            f"triton={server.pgid}",
            "--label-group",
            f"gateway={gateway.pid}",
            "--rounds",
            str(args.rounds),
            "--concurrency",
            args.concurrency,
            "--input-len",
            str(args.input_len),
            "--output-len",
            str(args.output_len),
            "--log-dir",
            str(args.out),
            "--out",
            str(args.work),
        ]
        bench_argv += ["--warmup-rounds", str(args.warmup_rounds)]
        if args.num_prompts:
            bench_argv += ["--num-prompts", args.num_prompts]
        if args.max_seconds is not None:
            bench_argv += ["--max-seconds", str(args.max_seconds - (time.monotonic() - started))]
        if args.agreement:
            setup["agreement"] = agreement(f"http://127.0.0.1:{port}", args, tokenizer)
            (args.out / "bench_agreement.json").write_text(json.dumps(setup, indent=1) + "\n")
        else:
            openai_gateway.main(bench_argv)
    except BaseException:
        setup["error"] = traceback.format_exc()
        print(setup["error"], flush=True)
    finally:
        if gateway is not None:
            os.killpg(gateway.pid, signal.SIGTERM)
            try:
                gateway.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(gateway.pid, signal.SIGKILL)
        stop_started = time.monotonic()
        server.stop()
        setup["triton_stop_s"] = round(time.monotonic() - stop_started, 1)

    written = sorted(args.work.glob("openai_gateway_*.json"))
    results = json.loads(written[-1].read_text()) if written else {}
    try:
        import vllm

        setup["vllm_version"] = vllm.__version__
    except ImportError:
        pass
    results["device_run"] = setup
    path = ResultFile(args.out, "openai_gateway_gpu").write(results)
    print(f"wrote {path}", flush=True)
    return 0 if "error" not in setup else 1


if __name__ == "__main__":
    sys.exit(main())
