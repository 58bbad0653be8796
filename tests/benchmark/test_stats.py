"""bench's figures from per-request records, the SLO and its goodput, arrival times, prompts fitted to a length,
datasets and the plot: pure logic, on records and a tokenizer made up for the purpose (the live server is
test_bench_e2e's)."""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest

from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.load import arrival_times
from vllm_repo.benchmark.plot import check_plot_path, svg
from vllm_repo.benchmark.prompts import fit_prompt, load_dataset, synthetic_prompts
from vllm_repo.benchmark.stats import RequestRecord, Slo, meets, parse_slo, percentile, summarize
from vllm_repo.errors import UsageError


def record(start: float, ttft: float, gaps: list[float], tokens: int | None = None) -> RequestRecord:
    return RequestRecord(
        start=start, ok=True, ttft=ttft, itl=gaps, e2e=ttft + sum(gaps), output_tokens=tokens or len(gaps) + 1
    )


def failed(start: float, error: str = "HTTP 400: too long") -> RequestRecord:
    return RequestRecord(start=start, error=error)


# -- percentiles -----------------------------------------------------------------------------------------------------


def test_percentiles_interpolate_between_ranks_as_numpy_does():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([float(v) for v in range(1, 101)], 99) == pytest.approx(99.01)
    assert percentile([7.0], 90) == 7.0
    assert math.isnan(percentile([], 50))


# -- the SLO ---------------------------------------------------------------------------------------------------------


def test_slo_parses_every_key_and_refuses_what_it_does_not_know():
    assert parse_slo("ttft_p99_ms=1000, itl_p99_ms=40,e2e_p99_ms=5e3") == Slo(1000.0, 40.0, 5000.0)
    assert not parse_slo(None) and parse_slo("itl_p99_ms=40").given() == {"itl_p99_ms": 40.0}
    for bad, says in [
        ("ttft=100", "not KEY=MILLISECONDS"),
        ("ttft_p99_ms=fast", "positive number"),
        ("ttft_p99_ms=-1", "positive number"),
        ("ttft_p99_ms=inf", "positive number"),
        ("ttft_p99_ms=1,ttft_p99_ms=2", "given twice"),
    ]:
        with pytest.raises(UsageError, match=says):
            parse_slo(bad)


def test_a_request_meets_the_slo_only_if_it_meets_every_target_given():
    slow_start = record(0.0, ttft=0.5, gaps=[0.01] * 10)
    slow_gaps = record(0.0, ttft=0.05, gaps=[0.01] * 9 + [0.2])
    assert meets(slow_start, Slo(itl_p99_ms=50)) and not meets(slow_start, Slo(ttft_p99_ms=100))
    # The request's own p99 gap: one slow gap among ten is above it.
    assert not meets(slow_gaps, Slo(itl_p99_ms=50)) and meets(slow_gaps, Slo(ttft_p99_ms=100))
    assert not meets(slow_start, Slo(e2e_p99_ms=550)) and meets(slow_start, Slo(e2e_p99_ms=650))
    assert not meets(failed(0.0), Slo(ttft_p99_ms=1e9))


# -- a point's figures -----------------------------------------------------------------------------------------------


def test_a_point_counts_only_completed_requests_in_its_throughput_and_latencies():
    records = [record(0.0, 0.1, [0.02] * 9, tokens=10), record(0.5, 0.3, [0.04] * 9, tokens=10), failed(0.7)]
    point = summarize(records, wall_s=2.0, load={"concurrency": 2}, slo=Slo())
    assert point["concurrency"] == 2
    assert (point["requests"], point["completed"], point["failed"]) == (3, 2, 1)
    assert point["output_tokens_per_s"] == 10.0  # 20 tokens of the two completed requests over 2 s
    assert point["requests_per_s"] == 1.0
    assert point["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert point["itl_ms"]["p50"] == pytest.approx(30.0)  # 18 gaps pooled: nine of 20 ms, nine of 40 ms
    assert point["e2e_ms"]["p99"] == pytest.approx(660 - 0.01 * (660 - 280), abs=1e-3)
    assert point["errors"] == [{"error": "HTTP 400: too long", "count": 1}]
    assert point["goodput_rps"] is None and point["slo_met"] is None


def test_goodput_counts_the_requests_within_the_slo_per_second_and_slo_met_reads_the_p99():
    quick = [record(i * 0.1, 0.05, [0.01] * 4) for i in range(98)]
    slow = [record(9.8, 2.0, [0.01] * 4), record(9.9, 2.0, [0.01] * 4)]
    point = summarize([*quick, *slow], wall_s=10.0, load={"request_rate": 10.0}, slo=Slo(ttft_p99_ms=100))
    assert point["goodput_rps"] == pytest.approx(9.8)
    # Two requests in a hundred over the target put the p99 over it.
    assert point["slo_met"] is False
    assert summarize(quick, 10.0, {"request_rate": 10.0}, Slo(ttft_p99_ms=100))["slo_met"] is True
    impossible = summarize(quick, 10.0, {"request_rate": 10.0}, Slo(ttft_p99_ms=1))
    assert impossible["goodput_rps"] == 0 and impossible["slo_met"] is False
    # A failure misses the SLO even when every completed request was quick.
    with_failure = summarize([*quick, failed(9.9)], 10.0, {"request_rate": 10.0}, Slo(ttft_p99_ms=100))
    assert with_failure["slo_met"] is False and with_failure["goodput_rps"] == pytest.approx(9.8)


def test_a_point_where_every_request_failed_has_no_latencies():
    point = summarize([failed(0.0), failed(0.1, "refused")], 0.5, {"concurrency": 1}, Slo(ttft_p99_ms=10))
    assert point["completed"] == 0 and point["failed"] == 2 and point["output_tokens_per_s"] == 0
    assert point["ttft_ms"]["p99"] is None and point["goodput_rps"] == 0 and point["slo_met"] is False
    json.dumps(point, allow_nan=False)  # the JSON report stays valid JSON


# -- arrivals --------------------------------------------------------------------------------------------------------


def test_poisson_arrivals_end_at_count_over_rate_and_repeat_with_the_seed():
    times = arrival_times(200, rate=8.0, seed=3)
    assert times == sorted(times) and times[-1] == pytest.approx(25.0)
    assert times == arrival_times(200, 8.0, 3) and times != arrival_times(200, 8.0, 4)
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    assert max(gaps) > 3 * min(gaps)  # random gaps, not a metronome


# -- prompts ---------------------------------------------------------------------------------------------------------


class RoundTripTokenizer:
    """A tokenizer for the test: a beginning-of-sequence token, then one token per two letters of each word (a word
    of five letters is three tokens), so that words and tokens do not line up; decode gives the text back."""

    def __init__(self) -> None:
        self.pieces: dict[int, str] = {}

    async def encode(self, text: str, special: bool) -> list[int]:
        ids = [0] if special else []
        for word in text.split():
            for i in range(0, len(word), 2):
                token = len(self.pieces) + 1
                self.pieces[token] = (" " if i == 0 else "") + word[i : i + 2]
                ids.append(token)
        return ids

    async def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids).strip()


@pytest.mark.parametrize("length", [2, 7, 64, 301])
def test_a_synthetic_prompt_is_fitted_to_exactly_the_length_asked_with_the_special_token(length):
    tokenizer = RoundTripTokenizer()
    prompts = asyncio.run(synthetic_prompts(5, length, 16, seed=1, tokenizer=tokenizer))
    assert prompts.source == "exact" and prompts.note is None
    counts = [len(asyncio.run(tokenizer.encode(p.text, True))) for p in prompts.prompts]
    assert counts == [length] * 5
    if length > 2:  # one token of content leaves few to choose from
        assert len({p.text for p in prompts.prompts}) == 5  # each its own: nothing for a prefix cache to share
    assert {p.output_len for p in prompts.prompts} == {16}


def test_a_length_the_tokenizer_cannot_reach_is_an_error_and_no_room_for_a_prompt_too():
    class Stubborn(RoundTripTokenizer):
        async def decode(self, ids: list[int]) -> str:
            return "abcdefghijkl " * len(ids)  # always longer again

    with pytest.raises(BenchError, match="exactly 10 tokens"):
        asyncio.run(fit_prompt(["word"] * 20, 10, 1, Stubborn(), random.Random(0)))
    with pytest.raises(BenchError, match="no room"):
        asyncio.run(synthetic_prompts(1, 1, 4, 0, RoundTripTokenizer()))


def test_without_a_tokenizer_prompts_are_words_and_say_so():
    class NoTokenize:
        async def encode(self, text: str, special: bool) -> list[int]:
            raise BenchError("/tokenize answered 404")

        async def decode(self, ids: list[int]) -> str:
            raise AssertionError

    prompts = asyncio.run(synthetic_prompts(3, 50, 8, 0, NoTokenize()))
    assert prompts.source == "approximate" and "approximate" in (prompts.note or "")
    assert [len(p.text.split()) for p in prompts.prompts] == [49] * 3


def test_a_dataset_is_vllms_custom_jsonl_and_its_errors_name_the_line(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "a", "output_tokens": 5}\n\n{"prompt": "b", "output_tokens": 7}\n')
    assert [(p.text, p.output_len) for p in load_dataset(data, None)] == [("a", 5), ("b", 7)]
    assert {p.output_len for p in load_dataset(data, 3)} == {3}
    for text, says in [
        ('{"prompt": "a"}\n', ":1: output_tokens .* is missing"),
        ('{"prompt": "a", "output_tokens": 1}\nnot json\n', ":2: not JSON"),
        ('{"text": "a", "output_tokens": 1}\n', ':1: no "prompt" string'),
        ('{"prompt": "a", "output_tokens": true}\n', ":1: output_tokens must be a positive whole number"),
        ("\n", "has no prompts"),
    ]:
        data.write_text(text)
        with pytest.raises(BenchError, match=says):
            load_dataset(data, None)
    with pytest.raises(BenchError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl", None)


# -- the plot --------------------------------------------------------------------------------------------------------


def report_with(points: list[dict], slo: dict) -> dict:
    return {"model": "m", "endpoint": "native", "url": "u", "prompts": "exact", "input_len": 8, "output_len": 4,
            "num_prompts": 2, "slo": slo, "notes": [], "interrupted": False, "points": points}  # fmt: skip


def test_the_plot_draws_each_point_and_the_slo_where_one_is_given():
    records = [record(0.0, 0.1, [0.02] * 3), record(0.0, 0.2, [0.03] * 3)]
    points = [summarize(records, 1.0, {"concurrency": c}, Slo()) for c in (1, 8)]
    drawn = svg(report_with(points, {"ttft_p99_ms": 150.0}))
    assert drawn.startswith("<svg") and drawn.count("<circle") == 3 * 2 * 2 + 2  # 3 panels x p50/p99 x 2, legend
    assert "SLO 150 ms" in drawn and "concurrency 8: p99" in drawn
    assert "SLO " not in svg(report_with(points, {})).replace("SLO (p99 target)", "")


def test_the_plot_file_is_refused_before_measuring(tmp_path):
    with pytest.raises(BenchError, match=r"\.html .* or \.svg"):
        check_plot_path(tmp_path / "plot.png", force=False)
    there = tmp_path / "plot.html"
    there.write_text("mine")
    with pytest.raises(BenchError, match="exists") as refused:
        check_plot_path(there, force=False)
    assert "--force" in (refused.value.hint or "")
    check_plot_path(there, force=True)
    with pytest.raises(BenchError, match="no directory"):
        check_plot_path(tmp_path / "nowhere" / "plot.svg", force=False)
