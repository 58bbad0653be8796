"""`bench REPO --model NAME` launches that model alone (Triton's explicit model control): the repository's other
models are neither checked as if they would load nor loaded. The launch plan bench builds, no server started."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_repo.benchmark import BenchSpec, bench_repository
from vllm_repo.scaffold import init_model
from vllm_repo.serve import launch, launch_plan
from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.python_env import PythonInfo
from vllm_repo.serve.server_files import ServerChoice, TritonHome


@pytest.fixture
def two_models(tmp_path, hf_model) -> Path:
    """A repository of "tiny", which loads, and "broken", whose model.json names a checkpoint that is not there."""
    repo = tmp_path / "model_repository"
    for name in ("tiny", "broken"):
        init_model(repo, str(hf_model), name=name, max_model_len=256)
    engine_args = repo / "broken" / "1" / "model.json"
    settings = json.loads(engine_args.read_text())
    settings["model"] = str(tmp_path / "no-such-checkpoint")
    engine_args.write_text(json.dumps(settings))
    return repo


@pytest.fixture
def planned(tmp_path, monkeypatch) -> list[Any]:
    """No serving Python, no Triton files, no server: bench's launch plan is recorded where run_server would run
    it."""
    python = PythonInfo(Path(sys.executable), "3.11", Path(sys.prefix) / "lib", "1.26.4", "0.32.0")
    monkeypatch.setattr(launch_plan, "probe_python", lambda executable: python)
    monkeypatch.setattr(launch_plan, "find_server", lambda *a, **k: ServerChoice(TritonHome(tmp_path), "cached"))
    plans: list[Any] = []
    monkeypatch.setattr(launch, "run_server", lambda plan, **kwargs: plans.append(plan))
    return plans


def test_bench_with_model_plans_that_model_alone(two_models, planned, tmp_path):
    bench_repository(two_models, BenchSpec(model="tiny"))
    (plan,) = planned
    assert plan.models == ["tiny"]
    # Triton is told to load that model and no other.
    assert "--model-control-mode=explicit" in plan.server_args
    assert [a for a in plan.server_args if a.startswith("--load-model")] == ["--load-model=tiny"]
    # The other model's missing checkpoint is not what this launch loads: not a finding either.
    assert not [d for d in plan.diagnostics if "broken" in str(d.path)]
    # The tritonserver command line of that plan names that model only.
    plan.backend_directory = tmp_path  # as laid out at start
    server = launch.server_for(plan)
    try:
        command = server.command()
    finally:
        server.stop()
    assert [a for a in command if "--load-model" in a] == ["--load-model=tiny"]
    assert command.count("--model-control-mode=explicit") == 1
    assert not [a for a in command if "broken" in a]


def test_without_model_the_whole_repository_is_checked_and_refused(two_models, planned):
    with pytest.raises(LaunchError, match="not starting"):  # the broken model, and two engines on one GPU
        bench_repository(two_models, BenchSpec(model=""))
    assert planned == []


def test_a_model_the_repository_does_not_have_is_refused_before_anything_starts(two_models, planned):
    with pytest.raises(LaunchError, match="has no model 'tiyn'") as refused:
        bench_repository(two_models, BenchSpec(model="tiyn"))
    assert "tiny" in (refused.value.hint or "") and "broken" in (refused.value.hint or "")
    assert planned == []


def test_the_loaded_model_alone_is_validated(two_models, planned):
    """A finding that would refuse the launch counts where the model is loaded, not where it is left out."""
    engine_args = two_models / "broken" / "1" / "model.json"
    engine_args.write_text(engine_args.read_text().replace('"max_model_len": 256', '"max_model_len": "8k"'))
    bench_repository(two_models, BenchSpec(model="tiny"))
    assert [p.models for p in planned] == [["tiny"]]
    engine_args = two_models / "tiny" / "1" / "model.json"
    engine_args.write_text(engine_args.read_text().replace('"max_model_len": 256', '"max_model_len": "8k"'))
    with pytest.raises(LaunchError, match="does not pass validate"):
        bench_repository(two_models, BenchSpec(model="tiny"))
