"""The hop hook (vllm_repo_backend/hops.py) the hop benchmarks read: with VLLM_REPO_TRACE_HOPS set, each process
appends its named hops to DIR/hops.<pid>; unset, every site in the backend and the gateway holds ``off`` and nothing
is written anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vllm_repo.backend.vllm_repo_backend.hops import TRACE_HOPS

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os
from vllm_repo.backend.vllm_repo_backend import engine_link, engine_process, hops, openai_serving
from vllm_repo.backend import model
from vllm_repo.serve.openai import app, stream_socket, triton
sites = (model, engine_link, engine_process, openai_serving, app, stream_socket, triton)
print("same hook everywhere:", all(m._hop is hops.hop and m._no_hop is hops.off for m in sites))
print("off:", hops.hop is hops.off)
request = object()
hops.executed([request])
hops.admitted("r1", request)
hops.hop("E", "r1")
class Job:
    def __init__(self, first):
        self.first = first
# V only for a request still in flight whose first response has not gone
read = [("r1", None, None), ("r2", None, None), ("gone", None, None)]
hops.first_outputs_read(read, {"r1": Job(True), "r2": Job(False)})
hops.openai_admitted(7)
child = os.fork()
if child == 0:
    hops.hop("C", "child")
    hops.flush()
    os._exit(0)
os.waitpid(child, 0)
print("pid:", os.getpid(), "child:", child)
"""


def run_script(cwd: Path, hops_dir: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != TRACE_HOPS}
    env["PYTHONPATH"] = str(ROOT)
    if hops_dir is not None:
        env[TRACE_HOPS] = hops_dir
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=cwd, env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)


def test_set_each_process_appends_its_hops_to_a_file_of_its_own(tmp_path):
    hops_dir = tmp_path / "hops"
    said = run_script(tmp_path, str(hops_dir))
    assert said["same hook everywhere"] == "True" and said["off"] == "False"
    pid, child = said["pid"].split(" child: ")
    lines = [line.split() for line in (hops_dir / f"hops.{pid}").read_text().splitlines()]
    assert [line[:2] for line in lines] == [
        ["X", "r1"], ["A", "r1"], ["E", "r1"], ["V", "r1"], ["B0", "7"], ["B1", "7"],
    ]  # fmt: skip
    stamps = [int(line[2]) for line in lines]
    # X and B0 carry the time execute() was called, before the hop that writes them.
    assert 0 < stamps[0] == stamps[4] <= stamps[1] <= stamps[2] <= stamps[3] <= stamps[5]
    # A forked child writes its own file, without its parent's buffered lines.
    assert [line.split()[:2] for line in (hops_dir / f"hops.{child}").read_text().splitlines()] == [["C", "child"]]


def test_unset_every_site_holds_the_no_op_and_nothing_is_written(tmp_path):
    said = run_script(tmp_path, None)
    assert said["same hook everywhere"] == "True" and said["off"] == "True"
    assert list(tmp_path.iterdir()) == []


def test_an_empty_value_is_off(tmp_path):
    said = run_script(tmp_path, "")
    assert said["off"] == "True"
    assert list(tmp_path.iterdir()) == []
