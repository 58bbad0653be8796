"""End to end: `bench REPO --compare` on the tiny model with vLLM on the CPU: against vllm serve (both kept loaded,
two rounds, two load points), and against another backend directory (one server at a time); the refusals that come
before any server starts, and a vllm serve that fails to load. Nothing may be left running after any of them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launch import DescendantsWatch, assert_family_gone, kill_groups, shm_names
from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON
from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.vllm_serve import ServeArgs, VllmServe
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.python_env import probe_python

pytestmark = [NEEDS_SERVING]
INPUT_LEN, OUTPUT_LEN, PROMPTS = 24, 6, 3


def run_bench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """bench in a session of its own, and once it has exited, nothing it started left: no process of the groups it
    started (each server, gateway and guardian leads its own), no /dev/shm segment they used (assert_family_gone,
    as launch's tests check theirs)."""
    command = [sys.executable, "-m", "vllm_repo", "bench", *args]
    shm_before = shm_names()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    watch = DescendantsWatch(proc.pid, shm_before)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        watch.stop()
        kill_groups(watch.groups | {proc.pid})
        raise
    assert_family_gone(watch)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def load_args(*concurrency: int) -> list[str]:
    return [
        "--concurrency", ",".join(map(str, concurrency)), "--num-prompts", str(PROMPTS),
        "--input-len", str(INPUT_LEN), "--output-len", str(OUTPUT_LEN), "--python", SERVING_PYTHON or "",
    ]  # fmt: skip


def check_sides(report: dict, rounds: int) -> None:
    """Every side measured every point over every round with the exact work asked for, and the ratios made from the
    same rounds as the sides' own per-round figures."""
    comparison = report["comparison"]
    sides = {s["name"]: s for s in comparison["sides"]}
    reference = sides[comparison["reference"]]
    for side in sides.values():
        assert len(side["rounds"]) == rounds
        for point in side["points"]:
            assert (point["completed"], point["failed"], point["rounds"]) == (PROMPTS * rounds, 0, rounds)
            assert point["output_tokens"] == PROMPTS * rounds * OUTPUT_LEN and point["input_tokens_mean"] == INPUT_LEN
    for i, point in enumerate(comparison["points"]):
        assert point["same_work"] is True and point["mismatched"] == 0
        assert point["requests_compared"] == PROMPTS * rounds * (len(sides) - 1)
        for name, ratios in point["ratios"].items():
            ours = [r[i]["output_tokens_per_s"] for r in sides[name]["rounds"]]
            theirs = [r[i]["output_tokens_per_s"] for r in reference["rounds"]]
            expected = [round(a / b, 4) for a, b in zip(ours, theirs, strict=True)]
            assert ratios["output_tokens_per_s"]["rounds"] == expected
            assert min(expected) <= ratios["output_tokens_per_s"]["median"] <= max(expected)


@pytest.mark.e2e
def test_compare_with_vllm_serve_measures_every_side_on_the_same_work(tiny_repository, tmp_path):
    out, plot = tmp_path / "compare.json", tmp_path / "compare.svg"
    done = run_bench(
        str(tiny_repository), "--compare", "vllm-serve", "--together", "--rounds", "2", *load_args(1, 2),
        "--format", "json", "--output", str(out), "--plot", str(plot),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "" and "vllm serve is ready" in done.stderr
    report = json.loads(out.read_text())
    comparison = report["comparison"]
    assert [s["name"] for s in comparison["sides"]] == ["triton native", "triton openai", "vllm-serve"]
    assert comparison["reference"] == "vllm-serve" and comparison["placement"].startswith("together")
    assert comparison["order"] == [["triton", "vllm-serve"], ["vllm-serve", "triton"]]
    assert [p["concurrency"] for p in comparison["points"]] == [1, 2]
    check_sides(report, rounds=2)
    # Each server's own processes, measured while its side ran: Triton's and its gateway, vllm serve's; the engine
    # core generated, so it was busy on both.
    roles = {side["name"]: side["points"][1]["server_cpu_by_role"] for side in comparison["sides"]}
    assert {"tritonserver", "Python backend stub", "OpenAI gateway", "EngineCore"} <= set(roles["triton native"])
    assert set(roles["triton native"]) == set(roles["triton openai"])  # the same server
    assert {"vllm serve API server", "EngineCore"} <= set(roles["vllm-serve"]), roles["vllm-serve"]
    assert not {"tritonserver", "OpenAI gateway"} & set(roles["vllm-serve"])
    assert all(r["EngineCore"] > 0 for r in roles.values()), roles
    # The top-level points are Triton's over its native endpoint, as bench REPO reports them.
    assert report["points"] == comparison["sides"][0]["points"]
    setup = comparison["setup"]
    assert setup["vllm"] and "Triton" in setup["triton"] and setup["gpu"].startswith("none")
    assert setup["vllm_serve_command"][:2] == ["vllm serve", report["comparison"]["setup"]["engine_args"]["model"]]
    assert set(setup["metrics"]) == {"triton", "vllm-serve"}
    drawing = plot.read_text()
    assert all(f">{name}</text>" in drawing for name in ("triton native", "triton openai", "vllm-serve"))


@pytest.mark.e2e
def test_compare_two_backend_directories_one_at_a_time(tiny_repository, tmp_path):
    from vllm_repo.backend import copy_backend

    other = tmp_path / "backends" / "vllm"
    other.mkdir(parents=True)
    copy_backend(other)
    marker = tmp_path / "other-backend-loaded"
    with (other / "model.py").open("a") as model_py:  # proves that Triton ran this copy, not the bundled one
        model_py.write(f"\nopen({str(marker)!r}, 'w').close()\n")
    done = run_bench(
        str(tiny_repository), "--compare", f"backend={other}", "--endpoint", "native", *load_args(1),
        "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    comparison = report["comparison"]
    assert [s["name"] for s in comparison["sides"]] == ["triton native", f"backend={other} native"]
    assert comparison["reference"] == f"backend={other} native"
    assert comparison["placement"].startswith("one at a time") and done.stderr.count("Triton is ready") == 2
    assert comparison["setup"]["backends"][f"backend={other}"]["vllm_repo_backend"] is True
    assert marker.exists()
    check_sides(report, rounds=1)


def write_repository(root: Path, tiny_repository: Path, config: str | None = None, extra: dict | None = None) -> Path:
    shutil.copytree(tiny_repository, root)
    if config is not None:
        (root / "tiny" / "config.pbtxt").write_text(config)
    if extra:
        model_json = root / "tiny" / "1" / "model.json"
        model_json.write_text(json.dumps({**json.loads(model_json.read_text()), **extra}))
    return root


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("no vllm", "(the serving Python) has no vLLM: `vllm serve` cannot run there"),
        ("ensemble", "'tiny' is an ensemble of other models"),
        ("key", "model.json's key 'not_a_flag' has no vllm serve flag"),
    ],
)
def test_what_cannot_be_compared_is_refused_before_any_server_starts(tiny_repository, tmp_path, case, words):
    repo, python = tiny_repository, SERVING_PYTHON or ""
    if case == "no vllm":
        python = sys.executable  # vllm-repo's own environment, which has no vLLM
    elif case == "ensemble":
        repo = write_repository(tmp_path / "repo", tiny_repository, 'name: "tiny"\nplatform: "ensemble"\n')
    else:
        repo = write_repository(tmp_path / "repo", tiny_repository, extra={"not_a_flag": 1})
    done = run_bench(str(repo), "--compare", "vllm-serve", "--python", python, timeout=120)
    assert done.returncode == 1 and words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "launching" not in done.stderr
    if case == "no vllm":
        assert f"{python} -m pip install vllm" in done.stderr


@pytest.mark.e2e
def test_a_vllm_serve_that_fails_to_load_says_why_and_leaves_nothing(tmp_path):
    serve = ServeArgs("tiny", {"model": str(tmp_path / "no-such-model"), "dtype": "float32"}, {}, None)
    server = VllmServe(probe_python(SERVING_PYTHON or ""), serve, free_port(), env={"HF_HUB_OFFLINE": "1"})
    server.start()
    assert server.process is not None
    pgid = server.process.pid
    try:
        with pytest.raises(BenchError) as raised:
            server.wait_ready(timeout=300)
    finally:
        server.stop()
    assert "vllm serve exited with status" in str(raised.value) and str(server.log_path) in str(raised.value.hint)
    assert process_group_members(pgid) == []
    assert server.log_path is not None and server.log_path.exists()  # kept: it says why
    server.log_path.unlink()
