"""tune's run with stand-ins for the server and bench (no Triton): what it writes when the time budget ends the search
before the best was measured again, and how many servers it says it started."""

from __future__ import annotations

import json

from tests.support.tune_world import spec
from vllm_repo.tune import run as tune_run
from vllm_repo.tune.report import to_text
from vllm_repo.tune.write import write as write_result


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
