#!/usr/bin/env python3
"""How much the bundled schemas and the key history cost a cold `validate` (run by hand).

    .venv/bin/python -m bench.schema_load [--runs 15]

Each figure is the median over fresh interpreters (cold caches, as in pre-commit):
- import engine_args: the loader alone (pydantic, packaging), which validate imports anyway;
- history via index: import vllm_repo.schema.history, read index.json, answer one explain_missing_key;
- history from files: the same when index.json is missing or stale (derived from every schema file);
- one schema: load_schema() of the newest release (what validate needs anyway);
- every schema: load_schema() of every bundled release.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

SNIPPETS = {
    "interpreter only": "pass",
    "import engine_args": "import vllm_repo.schema.loader",
    "history via index": (
        "from vllm_repo.schema.history import explain_missing_key\n"
        "explain_missing_key('disable_log_requests', '0.32.0')"
    ),
    "history from files": ("from vllm_repo.schema import history as key_history\nkey_history.build_index()"),
    "one schema": (
        "from vllm_repo.schema.loader import bundled_versions, load_schema\nload_schema(bundled_versions()[-1])"
    ),
    "every schema": (
        "from vllm_repo.schema.loader import bundled_versions, load_schema\n"
        "[load_schema(v) for v in bundled_versions()]"
    ),
}

TIMER = "import time\nt0 = time.perf_counter()\n{body}\nprint(time.perf_counter() - t0)\n"


def measure(body: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", TIMER.format(body=body)], capture_output=True, text=True, check=True
        )
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for name, body in SNIPPETS.items():
        print(f"{name:20s} {measure(body, args.runs) * 1000:8.1f} ms (median of {args.runs})")


if __name__ == "__main__":
    main()
