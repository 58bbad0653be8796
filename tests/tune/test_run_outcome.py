"""tune's run with stand-ins for the server and bench (no Triton): what it writes when the time budget ends the search
before the best was measured again, and how many servers it says it started."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from tests.conftest import write_hf_config
from vllm_repo.benchmark import BenchError, Slo
from vllm_repo.scaffold import init_model
from vllm_repo.tune import run as tune_run
from vllm_repo.tune.report import to_text
from vllm_repo.tune.write import write as write_result


class Clock:
    """tune's time: each measurement takes a minute of it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def point(goodput: float) -> dict[str, Any]:
    stats = {"p99": 100.0}
    return {"goodput_rps": goodput, "e2e_ms": stats, "ttft_ms": stats, "itl_ms": stats,
            "output_tokens_per_s": 10.0, "slo_met": True, "failed": 0, "completed": 8}  # fmt: skip


@pytest.fixture
def fake_world(tmp_path, monkeypatch):
    """A repository of a config-only model, and the server, launch plan and bench tune uses replaced by stand-ins;
    returns what they recorded (servers started, bench calls) and the knobs (failures: bench calls that fail)."""
    repo = tmp_path / "repo"
    init_model(repo, str(write_hf_config(tmp_path / "m")), name="llm", max_model_len=512)
    world: dict[str, Any] = {"servers": 0, "calls": 0, "failures": set(), "clock": Clock()}

    class Server:
        def __init__(self, *args: Any) -> None:
            self.restarts = 0
            self.grpc_url = "127.0.0.1:1"

        def start(self, timeout: float) -> None:
            world["servers"] += 1

        def reload(self, timeout: float) -> None:
            return None

        def stop(self) -> None:
            pass

    def bench(spec: Any, progress: Any = None) -> Any:
        world["calls"] += 1
        world["clock"].now += 60
        if world["calls"] in world["failures"]:
            raise BenchError("the server stopped answering")
        return types.SimpleNamespace(points=[point(1.0 + world["calls"] / 10)], notes=[], interrupted=False)

    plan = types.SimpleNamespace(python=types.SimpleNamespace(vllm_version="0.32.0"), notes=[], env={})
    monkeypatch.setattr("vllm_repo.serve.launch_plan.prepare_launch", lambda *a, **k: plan)
    monkeypatch.setattr("vllm_repo.serve.launch_plan.has_nvidia_gpu", lambda: False)
    monkeypatch.setattr("vllm_repo.tune.server.ModelServer", Server)
    monkeypatch.setattr(tune_run, "bench", bench)
    monkeypatch.setattr(tune_run, "time", types.SimpleNamespace(monotonic=world["clock"].monotonic))
    world["repo"] = repo
    return world


def spec(world: dict[str, Any], **options: Any) -> tune_run.TuneSpec:
    return tune_run.TuneSpec(
        repository=world["repo"], model="llm", slo=Slo(ttft_p99_ms=1000), concurrency=[2], num_prompts=8,
        max_num_seqs=[8, 16], max_num_batched_tokens=[512], switches=[], **options,
    )  # fmt: skip


def test_a_best_the_budget_left_unconfirmed_is_not_written_and_the_run_says_so(fake_world):
    model_json = fake_world["repo"] / "llm" / "1" / "model.json"
    before = model_json.read_text()
    result = tune_run.tune(spec(fake_world, budget_minutes=2.5))  # two measurements, then no time for the third
    assert result.evidence.stopped == "budget"
    assert result.winner is None and result.evidence.confirmed is False
    assert any("measured once" in note and "not written" in note for note in result.evidence.notes)
    assert "before the best was measured again: --write does not take it" in to_text(result.evidence)
    written = write_result(result)
    assert model_json.read_text() == before and written.paths == [model_json.parent.parent / "tune.json"]
    assert json.loads(written.paths[0].read_text())["written"] is None


def test_a_confirmed_best_is_written(fake_world):
    result = tune_run.tune(spec(fake_world))
    assert result.evidence.confirmed is True and result.winner is not None
    written = write_result(result)
    assert len(written.paths) == 2 and json.loads(written.paths[-1].read_text())["written"]


def test_every_server_started_after_the_first_counts_as_a_restart(fake_world):
    fake_world["failures"] = {2, 3}  # two measurements lose their server: a new one starts for the next
    result = tune_run.tune(spec(fake_world))
    assert fake_world["servers"] == 3
    assert result.evidence.server_restarts == 2
