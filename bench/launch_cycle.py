"""`vllm-repo launch` start/stop cycles: seconds to ready, time to first streamed token through `infer`, seconds to
stop after Ctrl-C (SIGINT; with --openai, launch's OpenAI gateway too), what is left after it (processes, /dev/shm
segments), and the server process tree's memory, on the tiny model with vLLM on the CPU.

Run by hand from the repository root with the dev environment's Python:

    eval "$(bash .ci/setup-serving.sh | sed 's/^/export /')"
    python -m bench.launch_cycle [--cycles 3] [--out bench/results]

Targets on a 2-core machine: stop < 5 s with or without the gateway, nothing left; ready within a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_repo.scaffold import init_model
from vllm_repo.serve.infer import infer
from vllm_repo.serve.ports import free_ports
from vllm_repo.serve.processes import process_group_members, process_table

from .lib.results import RESULTS, ResultFile
from .lib.tiny import ROOT, build_tiny_model, serving_python


def tree_rss_mib(pgid: int) -> float:
    total = 0
    for pid in process_group_members(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def server_pid(launch_pid: int) -> int | None:
    for pid, comm, fields in process_table():  # fields: state, ppid, ...
        if int(fields[1]) == launch_pid and "tritonserver" in comm:
            return pid
    return None


def cycle(repo: Path, python: str, openai: bool = False) -> dict:
    ports = free_ports(4)
    shm_before = set(os.listdir("/dev/shm"))
    url = f"http://127.0.0.1:{ports[0]}"
    began = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm_repo",
            "launch",
            str(repo),
            "--python",
            python,
            "--http-port",
            str(ports[0]),
            "--grpc-port",
            str(ports[1]),
            "--metrics-port",
            str(ports[2]),
            *(["--openai-port", str(ports[3])] if openai else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=ROOT,
    )
    for line in proc.stdout:
        if line.startswith("Triton is ready") or (openai and "is ready" in line):
            break
    else:
        raise SystemExit(f"launch exited with {proc.wait()}")
    ready_s = time.monotonic() - began
    server = server_pid(proc.pid)
    first: list[float] = []
    sent = time.monotonic()
    infer(
        "tiny",
        "Triton Inference Server serves",
        url=url,
        max_tokens=64,
        params={"ignore_eos": True},
        on_text=lambda piece: first.append(time.monotonic()) if not first else None,
    )
    ttft_ms = (first[0] - sent) * 1000
    rss = tree_rss_mib(server) if server else None
    stop_began = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    code = proc.wait(60)
    stop_s = time.monotonic() - stop_began
    left = process_group_members(server) if server else []
    shm_left = sorted(set(os.listdir("/dev/shm")) - shm_before)
    return {
        "ready_s": round(ready_s, 1),
        "first_token_ms": round(ttft_ms, 1),
        "tree_rss_mib": rss and round(rss),
        "stop_s": round(stop_s, 1),
        "exit_code": code,
        "processes_left": len(left),
        "shm_segments_left": shm_left,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--openai", action="store_true", help="launch with --openai-port (the OpenAI gateway too)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    python = serving_python()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny-llama"
        build_tiny_model(model, python)
        repo = Path(tmp) / "model_repository"
        init_model(repo, str(model), name="tiny", max_model_len=512, settings={"dtype": "float32"})
        results = [cycle(repo, python, args.openai) for _ in range(args.cycles)]
    summary = {
        key: statistics.median(r[key] for r in results)
        for key in ("ready_s", "first_token_ms", "tree_rss_mib", "stop_s")
    }
    report = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "openai_gateway": args.openai,
        "cycles": results,
        "median": summary,
    }
    result_file = ResultFile(args.out, "launch_cycle", indent=2, newline=True)
    # The gateway's cycles are told apart by a suffix after the time: launch_cycle_STAMP_openai.json.
    result_file.started += "_openai" if args.openai else ""
    path = result_file.write(report)
    print(json.dumps(report, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
