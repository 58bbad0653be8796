"""Faults under load through Triton + the bundled backend, with metrics on as `vllm-repo init` writes a model:

1. cancel: STREAMS streams over HTTP generate_stream, a quarter of them closed by their clients after a few
   responses. Every other request must end complete, every closed one must be aborted in the engine (the backend's
   "aborted in the engine" log line, one per closed stream), and the running/waiting gauges must come back to 0.
2. kill: STREAMS streams, then the engine's process killed with SIGKILL mid-load (ENGINE_PROCESS's own process, or
   in the stub's shape vLLM's EngineCore below the stub). Every open request must end with an error (none hangs), the
   model must report not ready (ENABLE_VLLM_HEALTH_CHECK unloads it), and a load through Triton's model-control API
   must serve again.

Run by hand with the serving Python, from the repository root (bench/results/backend.md has the runs):

    $VLLM_REPO_SERVING_PYTHON -m bench.backend_faults [--streams 32] [--parameters '{"ENGINE_PROCESS": "true"}']
    python -m bench.backend_faults --device gpu --model M --engine-args '{"load_format": "dummy", ...}' --streams 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import time
import urllib.request
from pathlib import Path

from vllm_repo.serve.errors import InferError
from vllm_repo.serve.triton_client import GenerateResponse, GenerateStreamConnection, TritonHttp

from .lib.processes import children_of, process_group, stub_pids
from .lib.results import RESULTS, ResultFile
from .lib.triton_bench import MODEL_NAME, PROMPT, add_server_options, prepare, read_stream, sampling_json, write_model

ABORTED = "cancelled by the client: aborted in the engine"
ENGINE_PROCESS_READY = re.compile(rf"model {MODEL_NAME} ready \(vLLM [^,]+, process (\d+)\)")


async def one_stream(
    host: str,
    port: int,
    tokens: int,
    close_after: int | None,
    deadline_s: float,
    streaming: asyncio.Event | None = None,
) -> dict:
    """One generate_stream request: its outcome ("complete", "closed", "error", "hung") and tokens received;
    ``streaming`` is set at its first response."""
    received: list[int] = []  # each response's tokens, counted as they come (a hung stream keeps its count)

    def on_response(response: GenerateResponse) -> None:
        received.append(response.num_output_tokens or 0)
        if streaming is not None:
            streaming.set()

    conn = GenerateStreamConnection(f"http://{host}:{port}")
    body = {"text_input": PROMPT, "stream": True, "sampling_parameters": sampling_json(tokens)}
    body["return_num_output_tokens"] = True
    try:
        read = await asyncio.wait_for(read_stream(conn, MODEL_NAME, body, close_after, on_response), deadline_s)
        outcome, detail = ("closed" if read.closed else "complete"), ""
    except asyncio.TimeoutError:
        outcome, detail = "hung", f"no end within {deadline_s} s"
    except (InferError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
        outcome, detail = "error", str(exc)[:300]
    finally:
        await conn.close()
    return {"outcome": outcome, "tokens": sum(received), "detail": detail}


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        match = re.match(rf'(vllm:num_requests_\w+)\{{.*model="{MODEL_NAME}".*\}} ([\d.e+-]+)$', line)
        if match:
            values[match.group(1)] = float(match.group(2))
    return values


async def cancel_phase(server, streams: int, tokens: int) -> dict:
    aborted_before = server.log_text().count(ABORTED)
    closing = set(range(0, streams, 4))  # a quarter
    started = time.perf_counter()
    results = await asyncio.gather(
        *(one_stream(server.host, server.http_port, tokens, 3 if i in closing else None, 600) for i in range(streams))
    )
    wall = time.perf_counter() - started
    complete = [r for i, r in enumerate(results) if i not in closing]
    deadline = time.monotonic() + 30
    while server.log_text().count(ABORTED) - aborted_before < len(closing) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    gauges = {}
    while time.monotonic() < deadline + 30:
        gauges = scrape(server.metrics_url)
        if gauges and not any(gauges.values()):
            break
        await asyncio.sleep(0.5)
    return {
        "streams": streams,
        "closed_by_client": len(closing),
        "complete": sum(r["outcome"] == "complete" and r["tokens"] == tokens for r in complete),
        "others": len(complete),
        "not_complete": [r for r in complete if r["outcome"] != "complete" or r["tokens"] != tokens][:5],
        "aborted_in_engine": server.log_text().count(ABORTED) - aborted_before,
        "gauges_after": gauges,
        "wall_s": round(wall, 1),
    }


def engine_pid(server, stub_pid: int | None) -> int | None:
    """ENGINE_PROCESS's process (the backend logs its pid when the model is ready), else vLLM's EngineCore below the
    stub (in-stub shape)."""
    found = ENGINE_PROCESS_READY.findall(server.log_text())
    if found:
        return int(found[-1])
    if stub_pid is None:
        return None
    for pid in children_of(stub_pid):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if "EngineCore" in name or "VLLM" in name:
            return pid
    return None


async def kill_phase(server, streams: int, tokens: int, stub_pid: int | None) -> dict:
    victim = engine_pid(server, stub_pid)
    if victim is None:
        return {"error": "no engine process found"}
    started = [asyncio.Event() for _ in range(streams)]
    tasks = [
        asyncio.ensure_future(one_stream(server.host, server.http_port, tokens, None, 120, started[i]))
        for i in range(streams)
    ]
    # Under load: every stream admitted and streaming (or 60 s gone by).
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
    killed_at = time.perf_counter()
    os.kill(victim, signal.SIGKILL)
    results = await asyncio.gather(*tasks)
    ended_s = time.perf_counter() - killed_at
    triton = TritonHttp(f"http://{server.host}:{server.http_port}", timeout=600)
    # ENABLE_VLLM_HEALTH_CHECK unloads the model once the backend has seen the death.
    deadline = time.monotonic() + 60
    while (ready_after_kill := triton.request("GET", f"/v2/models/{MODEL_NAME}/ready").status) == 200:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    not_ready_after_s = time.perf_counter() - killed_at
    load_started = time.perf_counter()
    load_status = triton.request("POST", f"/v2/repository/models/{MODEL_NAME}/load", {}).status
    load_s = time.perf_counter() - load_started
    again = await one_stream(server.host, server.http_port, 16, None, 120)
    outcomes: dict[str, int] = {}
    for r in results:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    return {
        "streams": streams,
        "killed_pid": victim,
        "outcomes": outcomes,
        "errors_sample": sorted({r["detail"] for r in results if r["outcome"] == "error"})[:3],
        "all_ended_within_s": round(ended_s, 1),
        "ready_status_after_kill": ready_after_kill,
        "not_ready_after_s": round(not_ready_after_s, 1),
        "load_status": load_status,
        "load_s": round(load_s, 1),
        "served_after_reload": again,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_options(parser, "model directory (default on the CPU: a tiny model built here)")
    parser.add_argument("--parameters", default="{}", help="more config.pbtxt parameters, e.g. ENGINE_PROCESS")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    bench = prepare(parser, args, "backend-faults-", stats=True)
    settings = bench.settings
    # As init writes it (metrics on), and the health check that unloads a model whose engine died.
    parameters = {"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true", **json.loads(args.parameters)}
    kind = "KIND_CPU" if args.device == "cpu" else "KIND_GPU"
    write_model(bench.repo, settings, kind, parameters=parameters)
    server = bench.server(["--model-control-mode=explicit", f"--load-model={MODEL_NAME}"])
    results: dict = {"device": args.device, "engine_args": settings, "parameters": parameters, "tokens": args.tokens}
    server.start()
    try:
        server.wait_ready(timeout=900)
        stub = stub_pids(process_group(server.pgid)).get(MODEL_NAME)
        loop = asyncio.new_event_loop()
        results["cancel"] = loop.run_until_complete(cancel_phase(server, args.streams, args.tokens))
        print("cancel:", json.dumps(results["cancel"]), flush=True)
        results["kill"] = loop.run_until_complete(kill_phase(server, args.streams, args.tokens, stub))
        print("kill:", json.dumps(results["kill"]), flush=True)
    finally:
        server.stop()
        results["log_tail"] = server.log_text().splitlines()[-40:]
    print(f"wrote {ResultFile(args.out, f'backend_faults_{args.device}').write(results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
