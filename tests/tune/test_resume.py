"""Resuming a tune from its tune.json: which measured candidates a run takes as they are, and what it refuses."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vllm_repo.tune import evidence as ev
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.evidence import CandidateRecord, Measurement, RunConditions, TuneEvidence, Winner
from vllm_repo.tune.run import resumed_candidates
from vllm_repo.tune.space import Candidate

RUN = {
    "model": "tiny",
    "version": "1",
    "base_args": {"model": "/models/tiny", "max_model_len": 512},
    "vllm_version": "0.26.0",
    "sized": "on H200",
    "slo": {"ttft_p99_ms": 1000.0, "itl_p99_ms": 40.0},
    "load": {"concurrency": [8, 16]},
    "input_len": 1024,
    "output_len": 128,
    "dataset": None,
    "num_prompts": 160,
    "seed": 0,
}


CONDITIONS = RunConditions(**RUN)  # type: ignore[arg-type]


def candidate(name, settings, status="measured", goodput=3.0):
    entry = CandidateRecord(name, "coarse", settings, 1, status)
    if status == "measured":
        entry.figures = Measurement(goodput, 900.0, [])
    return entry


def tune_json(tmp_path, **changes):
    candidates = [
        candidate("defaults", {"max_num_seqs": None, "max_num_batched_tokens": None}, goodput=2.0),
        candidate("max_num_seqs=8", {"max_num_seqs": 8}, goodput=3.5),
        candidate("max_num_seqs=16", {"max_num_seqs": 16}, status="interrupted"),
        candidate("max_num_batched_tokens=99999", {"max_num_batched_tokens": 99999}, status="dropped"),
    ]
    doc = {"format": ev.FORMAT, **RUN, "candidates": [c.to_json() for c in candidates], **changes}
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_same_run_takes_only_the_measured_candidates_by_their_settings(tmp_path):
    taken = resumed_candidates(tune_json(tmp_path), CONDITIONS)
    assert set(taken) == {Candidate().key(), Candidate.of({"max_num_seqs": 8}).key()}
    assert taken[Candidate.of({"max_num_seqs": 8}, stage="max_num_seqs fine").key()].goodput_rps == 3.5


@pytest.mark.parametrize(
    "key, value",
    [
        ("slo", {"ttft_p99_ms": 500.0, "itl_p99_ms": 40.0}),
        ("load", {"concurrency": [32]}),
        ("base_args", {"model": "/models/tiny", "max_model_len": 512, "max_num_seqs": 8}),  # --write changed it
        ("vllm_version", "0.27.0"),
        ("num_prompts", 100),
    ],
)
def test_another_run_takes_nothing_and_says_what_differs(tmp_path, key, value):
    path = tune_json(tmp_path, **{key: value})
    with pytest.raises(TuneError) as refused:
        resumed_candidates(path, CONDITIONS)
    assert str(path) in refused.value.message and key in refused.value.message
    assert refused.value.hint and "--resume" in refused.value.hint


def test_no_file_or_not_a_tune_json_is_a_clear_error(tmp_path):
    with pytest.raises(TuneError, match="no such file"):
        resumed_candidates(tmp_path / "tune.json", CONDITIONS)
    (tmp_path / "other.json").write_text('{"format": 99}')
    with pytest.raises(TuneError, match=r"not a tune\.json"):
        resumed_candidates(tmp_path / "other.json", CONDITIONS)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TuneError, match="be read"):
        resumed_candidates(tmp_path / "broken.json", CONDITIONS)


def evidence(**changes):
    measured = candidate("max_num_seqs=8", {"max_num_seqs": 8}, goodput=3.5)
    measured.figures = Measurement(3.5, 900.0, [{}], 120.0, 20.0, 900.0, True, 0)
    doc = TuneEvidence(
        conditions=CONDITIONS,
        date="2026-01-01T00:00:00+00:00",
        wall_s=80.0,
        stopped=None,
        notes=[],
        search="coarse to fine",
        measurements=1,
        reused=0,
        candidates=[measured],
        pareto_front=["max_num_seqs=8"],
        winner=Winner("max_num_seqs=8", {"max_num_seqs": 8}, 1, 3.5, 900.0),
        defaults=None,
        margin_over_defaults=None,
    )
    return dataclasses.replace(doc, **changes)


def test_the_report_says_what_a_resumed_run_took_from_the_earlier_one():
    from vllm_repo.tune.report import to_text

    fresh = to_text(evidence())
    assert "1 measurement(s) in 80 s" in fresh and "taken" not in fresh
    resumed = to_text(evidence(reused=5, resumed_from="m/tune.json"))
    assert "1 measurement(s) in 80 s, 5 taken as measured in m/tune.json" in resumed


def test_entries_without_their_figures_are_measured_again(tmp_path):
    path = tune_json(tmp_path)
    doc = json.loads(path.read_text())
    doc["candidates"][1].pop("goodput_rps")  # edited by hand
    doc["candidates"].append({"status": "measured", "settings": "max_num_seqs=4"})
    path.write_text(json.dumps(doc))
    assert set(resumed_candidates(path, CONDITIONS)) == {Candidate().key()}


def test_a_candidate_measured_again_keeps_each_run_and_is_scored_by_their_mean():
    entry = candidate("max_num_seqs=8", {"max_num_seqs": 8}, goodput=3.0)
    entry.figures = Measurement(3.0, 900.0, [{"concurrency": 8}], ttft_p99_ms=500.0)
    entry.add_run("measured", Measurement(4.0, 1100.0, [{"x": 1}], ttft_p99_ms=450.0))
    on_disk = entry.to_json()
    assert [r["goodput_rps"] for r in on_disk["runs"]] == [3.0, 4.0]
    assert on_disk["runs"][0]["ttft_p99_ms"] == 500.0 and "points" not in on_disk["runs"][1]
    assert on_disk["goodput_rps"] == 3.5 and on_disk["e2e_p99_ms"] == 1000.0
    assert on_disk["points"] == [{"concurrency": 8}]  # the first run's load points stay the entry's own
    entry.add_run("failed", reason="did not load")
    on_disk = entry.to_json()
    assert on_disk["runs"][2] == {"reason": "did not load", "status": "failed", "goodput_rps": 0.0, "e2e_p99_ms": 900.0}
    assert on_disk["goodput_rps"] == round(7.0 / 3, 4)
