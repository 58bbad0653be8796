"""What the hop tools (native_hops.py, openai_hops.py) share: a benchmark run with the backend's hop hook on
(VLLM_REPO_TRACE_HOPS, vllm_repo/backend/vllm_repo_backend/hops.py), and the events it wrote read back."""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from vllm_repo.backend.vllm_repo_backend.hops import TRACE_HOPS


def run_traced(module: str, hops_dir: str, args: list[str]) -> int:
    """``python -m MODULE ARGS`` with every process it starts recording its hops into ``hops_dir``."""
    env = {**os.environ, TRACE_HOPS: os.path.abspath(hops_dir)}
    return subprocess.run([sys.executable, "-m", module, *args], env=env).returncode


def hop_lines(hops_dir: str) -> Iterator[tuple[str, str, int]]:
    """(tag, key, nanoseconds) of every event in HOPS_DIR/hops.*, file by file in name order; a line cut short by a
    process that was killed is passed over."""
    for path in sorted(glob.glob(os.path.join(hops_dir, "hops.*"))):
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                yield parts[0], parts[1], int(parts[2])


def hop_commands(description: str, module: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """A hop tool's parser, with its `run` command (``module`` with the hops recorded), and its `report` command's
    parser, HOPS_DIR given, for the tool's own options."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("run", help=f"python -m {module} with the hops recorded into HOPS_DIR")
    record.add_argument("hops_dir")
    record.add_argument("bench_args", nargs=argparse.REMAINDER, help=f"{module}'s options")
    show = commands.add_parser("report", help="what the recorded hops say")
    show.add_argument("hops_dir")
    return parser, show
