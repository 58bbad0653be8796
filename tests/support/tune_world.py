"""tune's run with stand-ins for the server and bench (no Triton): the ``fake_world`` fixture (registered by
tests/tune/conftest.py) and the TuneSpec its tests run."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.support.model_configs import write_hf_config
from vllm_repo.benchmark import BenchError, Slo
from vllm_repo.scaffold import init_model
from vllm_repo.tune import run as tune_run


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
    returns what they recorded (servers started, bench calls) and the knobs (failures: bench calls that fail; slumps:
    the goodput a bench call gives instead of its own, by call number)."""
    repo = tmp_path / "repo"
    init_model(repo, str(write_hf_config(tmp_path / "m")), name="llm", max_model_len=512)
    world: dict[str, Any] = {"servers": 0, "calls": 0, "failures": set(), "slumps": {}, "clock": Clock()}

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
        goodput = world["slumps"].get(world["calls"], 1.0 + world["calls"] / 10)
        return types.SimpleNamespace(points=[point(goodput)], notes=[], interrupted=False)

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
