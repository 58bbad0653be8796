"""tune.json as typed evidence, without a server: what the run keeps goes to the file and comes back the same, the
file a run writes reads back to the same JSON, validate's reading of it finds what --write wrote, and the report and
plot are made from a TuneEvidence."""

from __future__ import annotations

import json

from tests.support.tune_world import spec
from vllm_repo.repository.tune_record import tuned_settings
from vllm_repo.tune import run as tune_run
from vllm_repo.tune.evidence import (
    FORMAT,
    LATENCY,
    CandidateRecord,
    Defaults,
    Measurement,
    RunConditions,
    TuneEvidence,
    Winner,
    Written,
)
from vllm_repo.tune.report import svg, to_json, to_text
from vllm_repo.tune.write import write as write_result

CONDITIONS = RunConditions(
    model="llm", version="1", base_args={"model": "/models/tiny", "max_model_len": 512}, vllm_version="0.32.0",
    sized="on H100 80GB", slo={"ttft_p99_ms": 1000.0, "e2e_p99_ms": 3000.0}, load={"concurrency": [8]},
    input_len=1024, output_len=128, dataset=None, num_prompts=40, seed=0,
)  # fmt: skip


def point(goodput: float, e2e: float) -> dict:
    return {"goodput_rps": goodput, "e2e_ms": {"p99": e2e}, "ttft_ms": {"p99": 120.0}, "itl_ms": {"p99": 20.0},
            "output_tokens_per_s": 900.0, "slo_met": True, "failed": 0, "completed": 40}  # fmt: skip


def sample() -> TuneEvidence:
    defaults = CandidateRecord("defaults", "defaults", {}, 1, "measured", figures=Measurement(0.0, 0.0, []))
    defaults.figures = _measured(2.0, 1500.0)
    best = CandidateRecord("max_num_seqs=8", "max_num_seqs coarse", {"max_num_seqs": 8}, 1, "measured",
                           sizing={"kv_cache_tokens": 4096}, figures=_measured(3.0, 1200.0), load_s=12.5,
                           measure_s=30.0)  # fmt: skip
    best.add_run("measured", _measured(4.0, 1000.0), load_s=11.0, measure_s=29.0)
    best.add_run("failed", reason="did not load: out of memory", load_s=3.0)
    taken = CandidateRecord("max_num_seqs=16", "max_num_seqs coarse", {"max_num_seqs": 16}, 1, "measured",
                            figures=_measured(2.5, 900.0), reused=True)  # fmt: skip
    dropped = CandidateRecord("max_num_seqs=256", "batching grid", {"max_num_seqs": 256}, 1, "dropped",
                              reason="its KV cache cannot hold the load")  # fmt: skip
    failed = CandidateRecord("max_num_seqs=4", "max_num_seqs fine", {"max_num_seqs": 4}, 1, "failed",
                             reason="every request failed\nTraceback", figures=Measurement(None, None, []), load_s=1.0,
                             measure_s=2.0)  # fmt: skip
    for c in (best, taken):
        c.pareto = True
    return TuneEvidence(
        conditions=CONDITIONS, date="2026-12-01T00:00:00+00:00", wall_s=301.4, stopped=None, notes=["a note"],
        search="coarse to fine", measurements=5, reused=1, candidates=[defaults, best, taken, dropped, failed],
        pareto_front=["max_num_seqs=16", "max_num_seqs=8"],
        winner=Winner("max_num_seqs=8", {"max_num_seqs": 8}, 1, best.goodput_rps or 0.0, best.latency_ms),
        defaults=Defaults(2.0, 1500.0), margin_over_defaults=1.167, resumed_from="llm/tune.json", confirmed=True,
        written=Written("1", {"max_num_seqs": 8, "max_num_batched_tokens": None}, 1),
    )  # fmt: skip


def _measured(goodput: float, e2e: float) -> Measurement:
    return Measurement(goodput, e2e, [point(goodput, e2e)], 120.0, 20.0, 900.0, True, 0)


def test_the_evidence_goes_to_tune_json_and_comes_back_the_same(tmp_path):
    evidence = sample()
    path = tmp_path / "tune.json"
    path.write_text(evidence.dumps())
    assert TuneEvidence.loads(path.read_text()) == evidence
    # validate's reading of the file (rule VR510) finds what --write wrote, a removed key as None.
    assert tuned_settings(path) == ("1", {"max_num_seqs": 8, "max_num_batched_tokens": None})


def test_the_files_keys_are_those_tune_json_has_always_had():
    data = json.loads(sample().dumps())
    assert list(data)[:14] == ["format", "model", "version", "base_args", "vllm_version", "sized", "slo", "load",
                               "input_len", "output_len", "dataset", "num_prompts", "seed", "latency"]  # fmt: skip
    assert data["format"] == FORMAT and data["latency"] == LATENCY and data["finished"] is True
    assert data["winner"] == {"name": "max_num_seqs=8", "settings": {"max_num_seqs": 8}, "instances": 1,
                              "goodput_rps": 2.3333, LATENCY: 1133.333}  # fmt: skip
    assert data["defaults"] == {"goodput_rps": 2.0, LATENCY: 1500.0}
    best = data["candidates"][1]
    assert best["goodput_rps"] == 2.3333 and best["points"] == [point(3.0, 1200.0)] and best["pareto"] is True
    assert best["runs"][0] == {"goodput_rps": 3.0, LATENCY: 1200.0, "ttft_p99_ms": 120.0, "itl_p99_ms": 20.0,
                               "output_tokens_per_s": 900.0, "slo_met": True, "failed": 0, "load_s": 12.5,
                               "measure_s": 30.0}  # fmt: skip
    assert best["runs"][2] == {"goodput_rps": 0.0, LATENCY: 1200.0, "load_s": 3.0,
                               "reason": "did not load: out of memory", "status": "failed"}  # fmt: skip
    dropped, failed = data["candidates"][3], data["candidates"][4]
    assert set(dropped) == {"name", "stage", "settings", "instances", "status", "reason", "sizing", "pareto"}
    assert failed["goodput_rps"] is None and failed[LATENCY] is None and failed["points"] == []
    assert "ttft_p99_ms" not in failed and "reused" not in failed and data["candidates"][2]["reused"] is True


def test_a_run_writes_a_tune_json_that_reads_back_to_the_same_json(fake_world):
    result = tune_run.tune(spec(fake_world))
    path = write_result(result).paths[-1]
    on_disk = json.loads(path.read_text())
    assert TuneEvidence.from_json(on_disk).to_json() == on_disk
    assert json.loads(to_json(result.evidence)) == on_disk


def test_entries_a_hand_edit_broke_are_left_out_and_missing_fields_take_their_defaults():
    data = json.loads(sample().dumps())
    data["candidates"].append("not an entry")
    data["candidates"].append({"name": "x", "settings": "max_num_seqs=4"})
    del data["written"], data["confirmed"]
    read = TuneEvidence.from_json(data)
    assert len(read.candidates) == 5 and read.written is None and read.confirmed is False


def test_the_report_of_an_evidence_shows_the_table_the_winner_and_the_dropped():
    text = to_text(sample())
    lines = text.splitlines()
    assert lines[0] == "llm (vLLM 0.32.0), sized on H100 80GB"
    assert lines[1] == "SLO: ttft_p99_ms <= 1000, e2e_p99_ms <= 3000"
    assert lines[2] == "load: concurrency 8; 1024 tokens in, 128 out; 40 requests per point"
    assert "note: a note" in lines
    row = next(line for line in lines if line.startswith(">"))
    assert row.split()[:2] == [">", "max_num_seqs=8"] and row.split()[-2:] == ["900.0", "met"]
    assert any(line.startswith("*") and "max_num_seqs=16" in line for line in lines)
    assert "measured 3 times: max_num_seqs=8: goodput 3, 4, 0 (failed) req/s, the mean shown" in lines
    assert "dropped: max_num_seqs=256: its KV cache cannot hold the load" in lines
    assert "failed: max_num_seqs=4: every request failed" in lines  # the reason's first line
    assert (
        "winner: max_num_seqs=8: goodput 2.3333 req/s, p99 end-to-end 1133 ms, 1.17x vLLM's defaults (2 req/s, "
        "p99 end-to-end 1500 ms)" in lines
    )
    assert lines[-1] == "5 measurement(s) in 301 s, 1 taken as measured in llm/tune.json"


def test_the_plot_of_an_evidence_marks_the_measured_candidates_and_the_slo():
    drawn = svg(sample())
    assert drawn.count("<circle") == 3 + 2  # the three measured, and the legend's two
    assert "max_num_seqs=8 (winner)" in drawn and "SLO 3000 ms" in drawn
    assert "max_num_seqs=256" not in drawn and "max_num_seqs=4:" not in drawn
