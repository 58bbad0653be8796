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


def test_a_best_left_unconfirmed_when_the_confirmations_are_spent_is_not_written_and_the_run_says_why(fake_world):
    measured = tune_run.tune(spec(fake_world)).evidence.measurements  # the last of them is the confirmation
    fake_world["calls"] = 0
    # The best measured again falls below the next best, which was measured once: --confirm 1 is spent.
    fake_world["slumps"] = {measured: 0.5}
    result = tune_run.tune(spec(fake_world))
    assert result.evidence.stopped is None and result.winner is None and result.evidence.confirmed is False
    (note,) = [n for n in result.evidence.notes if "measured once" in n]
    assert "confirmation(s) of --confirm 1 were spent" in note and "--confirm 2 measures it again" in note
    assert "budget" not in note
    assert "the confirmations were spent before the best was measured again" in to_text(result.evidence)
    # What the note says to do does it: with one more confirmation the new best is measured again and written.
    fake_world["calls"] = 0
    result = tune_run.tune(spec(fake_world, confirm=2))
    assert result.evidence.confirmed is True and result.winner is not None
    (record,) = [c for c in result.evidence.candidates if c.name == result.winner.name]
    assert len(record.runs) == 2


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
