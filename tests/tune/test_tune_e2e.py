"""End to end: `vllm-repo tune` on the tiny model with a real Triton server and vLLM on the CPU: one server, each
candidate reloaded through Triton's model-control API, measured with bench; --write and validate after it; and
Ctrl-C in the middle of the search."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.launch import _children
from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON
from vllm_repo.serve.processes import process_group_members

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]

# Three candidates on two cores: vLLM's defaults, max_num_seqs=2, and prefix caching turned off on the better of the
# two. max_num_batched_tokens=1048576 needs more activation memory than an 8 GiB GPU has: the estimator drops it
# (with and without max_num_seqs=2) before anything starts.
SPACE = (
    "--slo", "ttft_p99_ms=60000,itl_p99_ms=60000", "--concurrency", "2", "--num-prompts", "6", "--input-len", "16",
    "--output-len", "4", "--max-num-seqs", "2", "--max-num-batched-tokens", "1048576",
    "--switches", "enable_prefix_caching", "--gpu", "8", "--python", SERVING_PYTHON,
)  # fmt: skip


@pytest.fixture
def repo(tiny_repository, tmp_path) -> Path:
    """A copy of the tiny model's repository: tune --write changes it."""
    copy = tmp_path / "model_repository"
    shutil.copytree(tiny_repository, copy)
    return copy


class Tune:
    """`vllm-repo tune` in its own process group, with the tritonserver it starts noted as it appears."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "vllm_repo", "tune", *args]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            # Ctrl-C as a terminal delivers it: a test runner started in the background ignores SIGINT, and its
            # children would inherit that.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.servers: set[int] = set()
        self.err: list[str] = []
        threading.Thread(target=self._note_servers, daemon=True).start()
        self.out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stdout, self.out), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _note_servers(self) -> None:
        while self.proc.poll() is None:
            self.servers.update(pid for pid, comm in _children(self.proc.pid) if comm == "tritonserver")
            time.sleep(0.2)

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.err):
            assert self.proc.poll() is None and time.monotonic() < deadline, "".join(self.err)
            time.sleep(0.2)

    def finish(self, timeout: float) -> tuple[str, str]:
        ended = False
        try:
            self.proc.wait(timeout=timeout)
            ended = True
        except subprocess.TimeoutExpired:
            pass
        finally:
            for pgid in (self.proc.pid, *self.servers):  # a safety net: the assertions say whether it was needed
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for reader in self._readers:
            reader.join(5)
        err = "".join(self.err)
        assert ended, f"tune had not ended after {timeout:g} s; what it wrote:\n{err[-8000:]}"
        return "".join(self.out), err


@pytest.mark.slow
def test_tune_measures_the_candidates_writes_the_winner_and_validate_accepts_it(repo, tmp_path):
    log = tmp_path / "server.log"
    plot = tmp_path / "tune.html"
    model_json = repo / "tiny" / "1" / "model.json"
    before = json.loads(model_json.read_text())
    # --confirm 3 (one per measured candidate): on two shared cores a confirmed best's mean can fall below a
    # candidate measured once; with a confirmation for each, the best is measured twice and written.
    args = ("--confirm", "3", "--write", "--format", "json", "--log", str(log), "--plot", str(plot))
    tune = Tune(str(repo), *SPACE, *args)
    out, err = tune.finish(600)
    assert tune.proc.returncode == 0, err
    report = json.loads(out)
    by_status: dict[str, list[dict]] = {}
    for c in report["candidates"]:
        by_status.setdefault(c["status"], []).append(c)
    # Dropped by the estimator before anything started, with the reason.
    assert {c["name"] for c in by_status["dropped"]} == {
        "max_num_batched_tokens=1048576", "max_num_batched_tokens=1048576 max_num_seqs=2",
    }  # fmt: skip
    for c in by_status["dropped"]:
        assert c["reason"].startswith("does not fit on 8 GiB GPU: No available memory for the cache blocks")
        assert "goodput_rps" not in c
    measured = by_status["measured"]
    assert [c["name"] for c in measured][:2] == ["defaults", "max_num_seqs=2"]
    assert len(measured) == 3 and measured[2]["stage"] == "switch"
    assert "enable_prefix_caching=false" in measured[2]["name"]
    for c in measured:
        (point,) = c["points"]
        assert point["completed"] == 6 and point["failed"] == 0 and point["output_tokens"] == 24
        first = c["runs"][0]["goodput_rps"] if "runs" in c else c["goodput_rps"]
        assert first == point["goodput_rps"] > 0 and c["slo_met"] is True
    # The search's best was measured once more (and each best after it), scored by the mean of its two runs.
    confirmed = [c for c in measured if "runs" in c]
    assert confirmed and report["confirmed"] is True
    for c in confirmed:
        assert len(c["runs"]) == 2 and c["runs"][1]["goodput_rps"] > 0
        assert c["goodput_rps"] == pytest.approx(sum(r["goodput_rps"] for r in c["runs"]) / 2, abs=1e-4)
    assert report["measurements"] == 3 + len(confirmed)
    # One server; each candidate was a reload, and the reload ran the rewritten model.json (vLLM logs its config).
    assert len(tune.servers) == 1 and report["server_restarts"] == 0
    configs = [
        "enable_prefix_caching=False" in line
        for line in log.read_text().splitlines()
        if "Initializing a V1 LLM engine" in line
    ]
    assert configs[:3] == [False, False, True]
    confirmed_off = [c["settings"].get("enable_prefix_caching") is False for c in confirmed]
    assert sorted(configs[3:]) == sorted(confirmed_off)
    assert process_group_members(next(iter(tune.servers))) == []
    # The winner is written, and the evidence beside the model says what.
    winner = report["winner"]
    assert winner["name"] in {c["name"] for c in confirmed}
    assert winner["goodput_rps"] == max(c["goodput_rps"] for c in measured)
    assert report["margin_over_defaults"] == pytest.approx(winner["goodput_rps"] / measured[0]["goodput_rps"], 1e-3)
    evidence = json.loads((repo / "tiny" / "tune.json").read_text())
    assert evidence["written"]["version"] == "1"
    after = json.loads(model_json.read_text())
    for key, value in evidence["written"]["settings"].items():
        assert after.get(key) == value
    assert {k: v for k, v in after.items() if k not in evidence["written"]["settings"]} == before
    # The diff shows what changed: nothing where the defaults won (two shared cores can rank them first).
    changed = any(before.get(key) != value for key, value in evidence["written"]["settings"].items())
    assert ("--- a/" in err) == changed and "wrote " in err
    assert "<svg" in plot.read_text() and "Pareto front" in plot.read_text()
    checked = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", str(repo), "--format", "json"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "VR510" not in checked.stdout
    # Changing a tuned setting by hand is what validate warns about.
    model_json.write_text(json.dumps({**after, "max_num_seqs": 64}, indent=2))
    checked = subprocess.run([sys.executable, "-m", "vllm_repo", "validate", str(repo)], capture_output=True, text=True)
    assert "VR510" in checked.stdout + checked.stderr


def test_ctrl_c_mid_search_stops_the_server_and_keeps_a_partial_tune_json_that_resume_finishes(repo, tmp_path):
    model_json = repo / "tiny" / "1" / "model.json"
    before = model_json.read_text()
    # --confirm 0: the count of loads below is then one per candidate.
    tune = Tune(str(repo), *SPACE, "--confirm", "0", "--write", "--format", "json")
    tune.wait_for("goodput", 400)  # the first candidate is measured
    tune.proc.send_signal(signal.SIGINT)
    out, err = tune.finish(120)
    assert tune.proc.returncode == 130, err
    assert "Traceback" not in err
    # Nothing is left: the server's process group is empty.
    assert len(tune.servers) == 1
    assert process_group_members(next(iter(tune.servers))) == []
    evidence = json.loads((repo / "tiny" / "tune.json").read_text())
    assert evidence["finished"] is False and evidence["stopped"] == "interrupted"
    assert evidence["written"] is None and evidence["winner"] is None
    statuses = [c["status"] for c in evidence["candidates"]]
    assert statuses.count("measured") >= 1 and statuses.count("dropped") == 2
    assert evidence["candidates"][statuses.index("measured")]["goodput_rps"] > 0
    assert model_json.read_text() == before  # nothing but the evidence is written
    assert json.loads(out)["stopped"] == "interrupted"

    # --resume takes what was measured and measures only the rest: one load per candidate not measured before.
    measured_before = {c["name"]: c for c in evidence["candidates"] if c["status"] == "measured"}
    log = tmp_path / "resumed.log"
    resumed = Tune(str(repo), *SPACE, "--confirm", "0", "--resume", "--write", "--format", "json", "--log", str(log))
    out, err = resumed.finish(600)
    assert resumed.proc.returncode == 0, err
    report = json.loads(out)
    measured = [c for c in report["candidates"] if c["status"] == "measured"]
    assert len(measured) == 3 and report["finished"] is True
    for c in measured:
        assert c.get("reused", False) == (c["name"] in measured_before)
        if c["name"] in measured_before:
            assert c["goodput_rps"] == measured_before[c["name"]]["goodput_rps"]
    assert report["reused"] == len(measured_before) and report["measurements"] == 3 - len(measured_before)
    loads = [line for line in log.read_text().splitlines() if "Initializing a V1 LLM engine" in line]
    assert len(loads) == report["measurements"]
    assert json.loads((repo / "tiny" / "tune.json").read_text())["written"] is not None
    # The model.json --write changed is another starting point: that tune.json is not resumed from.
    if json.loads(model_json.read_text()) != json.loads(before):
        again = subprocess.run(
            [sys.executable, "-m", "vllm_repo", "tune", str(repo), *SPACE, "--resume"], capture_output=True, text=True
        )
        assert again.returncode != 0 and "measured another run: base_args" in again.stderr
        assert "Traceback" not in again.stderr
