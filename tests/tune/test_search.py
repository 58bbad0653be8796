"""tune's pure logic: the candidate space, the estimator's verdict, the order the search measures in, the Pareto
front, and the model.json a candidate runs with."""

from __future__ import annotations

import pytest

from vllm_repo.benchmark import Slo
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.tune.candidates import candidate_args
from vllm_repo.tune.search import Outcome, Search, SearchStopped, coarse, pareto_front
from vllm_repo.tune.sizing import load_concurrency, refused_by_vllm
from vllm_repo.tune.space import (
    Axes,
    Candidate,
    Switch,
    capture_size,
    default_seqs,
    default_tokens,
    graph_switch,
    judge,
    kv_holds,
    layouts,
)
from vllm_repo.tune.spec import TuneSpec


def run_search(axes, score, dropped=()):
    """The search against a made-up landscape: ``score(candidate) -> goodput`` (None: fails to load)."""
    measured = []

    def measure(c):
        measured.append(c.name)
        goodput = score(c)
        return None if goodput is None else Outcome(goodput, 100.0 - goodput)

    search = Search(axes, lambda c: "too big" if c.name in dropped else None, measure)
    best = search.run()
    return best, measured, search


def test_coarse_takes_every_other_value_and_the_last():
    assert coarse([1, 2, 4, 8, 16]) == [1, 4, 16]
    assert coarse([1, 2, 4, 8]) == [1, 4, 8]
    assert coarse([8]) == [8]


def test_search_goes_coarse_to_fine_on_each_batching_axis_then_switches_then_layouts():
    # Goodput peaks at max_num_seqs 8 and max_num_batched_tokens 4096; prefix caching off helps.
    peak_seqs = {1: 1, 2: 2, 4: 4, 8: 9, 16: 6}
    peak_tokens = {1024: 0, 2048: 1, 4096: 3, 8192: 2, 16384: 0}

    def score(c):
        s = c.settings
        value = peak_seqs.get(s.get("max_num_seqs"), 5) + peak_tokens.get(s.get("max_num_batched_tokens"), 0)
        return value + (1 if s.get("enable_prefix_caching") is False else 0) + (0.5 * (c.instances == 2))

    axes = Axes(
        [1, 2, 4, 8, 16],
        [1024, 2048, 4096, 8192, 16384],
        [Switch("enable_prefix_caching", lambda best: False), Switch("enable_chunked_prefill", lambda best: False)],
        [(1, 2), (2, 1)],
    )
    best, measured, _ = run_search(axes, score)
    assert measured == [
        "defaults",
        # max_num_seqs coarse (1, 4, 16), then the neighbours of the best (16): 8
        "max_num_seqs=1", "max_num_seqs=4", "max_num_seqs=16", "max_num_seqs=8",
        # max_num_batched_tokens with max_num_seqs=8: coarse 1024, 4096, 16384; fine 2048, 8192
        "max_num_batched_tokens=1024 max_num_seqs=8", "max_num_batched_tokens=4096 max_num_seqs=8",
        "max_num_batched_tokens=16384 max_num_seqs=8", "max_num_batched_tokens=2048 max_num_seqs=8",
        "max_num_batched_tokens=8192 max_num_seqs=8",
        "enable_prefix_caching=false max_num_batched_tokens=4096 max_num_seqs=8",
        "enable_chunked_prefill=false enable_prefix_caching=false max_num_batched_tokens=4096 max_num_seqs=8",
        "enable_prefix_caching=false max_num_batched_tokens=4096 max_num_seqs=8 tensor_parallel_size=1 instances=2",
        "enable_prefix_caching=false max_num_batched_tokens=4096 max_num_seqs=8 tensor_parallel_size=2",
    ]  # fmt: skip
    assert best is not None
    assert best.settings == {
        "enable_prefix_caching": False, "max_num_batched_tokens": 4096, "max_num_seqs": 8, "tensor_parallel_size": 1,
    } and best.instances == 2  # fmt: skip
    # Far fewer measurements than the grid of the same space (5 x 5 batching points x 4 switch settings x 2 layouts).
    assert len(measured) <= (5 * 5 * 4 * 2) / 3


def test_a_dropped_candidate_is_never_measured_and_a_failed_one_never_wins():
    axes = Axes([2, 4, 8], [], [], [])
    best, measured, search = run_search(
        axes, lambda c: None if c.settings.get("max_num_seqs") == 8 else c.settings.get("max_num_seqs", 1),
        dropped={"max_num_seqs=4"},
    )  # fmt: skip
    assert "max_num_seqs=4" not in measured
    assert [c.name for c in search.visited] == ["defaults", "max_num_seqs=2", "max_num_seqs=8", "max_num_seqs=4"]
    assert best is not None and best.name == "max_num_seqs=2"


def test_the_same_settings_from_two_stages_are_measured_once():
    # The switch proposes the value the file already has after the batching stage: the same engine.
    axes = Axes([4], [], [Switch("max_num_seqs", lambda best: 4)], [])
    _, measured, _ = run_search(axes, lambda c: 1.0)
    assert measured == ["defaults", "max_num_seqs=4"]


def test_search_stopped_keeps_what_was_measured():
    axes = Axes([1, 2, 4], [], [], [])
    calls = []

    def measure(c):
        calls.append(c.name)
        if len(calls) == 3:
            raise SearchStopped("budget")
        return Outcome(float(len(calls)), 10.0)

    search = Search(axes, lambda c: None, measure)
    with pytest.raises(SearchStopped):
        search.run()
    assert search.best is not None and search.best.name == "max_num_seqs=1"


def test_pareto_front_keeps_the_points_nothing_beats_on_both_counts():
    points = [
        ("a", Outcome(10, 100)),
        ("b", Outcome(12, 150)),
        ("c", Outcome(9, 120)),  # beaten by a on both
        ("d", Outcome(12, 200)),  # beaten by b
        ("e", Outcome(5, 50)),
    ]
    assert pareto_front(points) == ["e", "a", "b"]


def test_the_estimator_drops_what_does_not_fit_and_what_cannot_hold_the_load():
    common = {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "block_size": 16, "where": "on L4"}
    gone = judge(
        fits=False, error="CUDA out of memory", kv_cache_tokens=0, concurrency=8, tokens_per_request=100, **common
    )
    assert gone.dropped == "does not fit on L4: CUDA out of memory"
    # 8 requests of 100 tokens take 7 blocks of 16 each: 896 tokens.
    short = judge(fits=True, error=None, kv_cache_tokens=895, concurrency=8, tokens_per_request=100, **common)
    assert short.dropped is not None and "8 requests of 100 tokens at once need 896" in short.dropped
    assert (
        judge(fits=True, error=None, kv_cache_tokens=896, concurrency=8, tokens_per_request=100, **common).dropped
        is None
    )
    # The engine runs at most max_num_seqs of them at once.
    few = {**common, "max_num_seqs": 2}
    assert (
        judge(fits=None, error=None, kv_cache_tokens=224, concurrency=8, tokens_per_request=100, **few).dropped is None
    )
    assert kv_holds(223, 2, 100, 16) == (False, 224)


def test_default_values_follow_the_load():
    assert default_seqs(64) == [4, 8, 16, 32, 64]
    assert default_seqs(3) == [1, 2, 3]
    assert default_tokens([32, 64]) == [1024, 2048, 4096, 8192, 16384]
    assert default_tokens([2048]) == [2048, 4096, 8192, 16384]
    assert capture_size(100) == 104 and capture_size(300) == 304 and capture_size(1) == 8


def test_layouts_only_where_the_host_has_gpus_to_share():
    assert layouts(1, 1, 32) == []
    assert layouts(4, 1, 32) == [(1, 4), (2, 2), (4, 1)]
    assert layouts(4, 1, 6) == [(1, 4), (2, 2)]  # 4 does not divide 6 attention heads


def test_graph_switch_by_release_and_settings():
    assert graph_switch({"max_cudagraph_capture_size"}, False, None) == ("max_cudagraph_capture_size", None)
    assert graph_switch({"cuda_graph_sizes"}, False, None) == ("cuda_graph_sizes", None)
    assert graph_switch({"max_cudagraph_capture_size"}, True, None)[0] is None
    key, why = graph_switch(set(), False, None)
    assert key is None and "no engine argument" in (why or "")


def test_a_candidates_model_json_drops_the_files_batching_settings_and_keeps_its_order():
    original = {"model": "m", "max_num_seqs": 512, "enforce_eager": True, "max_num_batched_tokens": 4096}
    assert candidate_args(original, Candidate()) == {"model": "m", "enforce_eager": True}
    args = candidate_args(original, Candidate.of({"max_num_seqs": 8, "enable_prefix_caching": False}))
    assert list(args.items()) == [
        ("model", "m"), ("max_num_seqs", 8), ("enforce_eager", True), ("enable_prefix_caching", False),
    ]  # fmt: skip


def test_settings_vllm_refuses_are_named():
    assert "smaller than max_num_seqs" in (
        refused_by_vllm(read_engine_settings({"max_num_seqs": 64, "max_num_batched_tokens": 32}), {}) or ""
    )
    args = {"max_model_len": 4096, "max_num_batched_tokens": 2048, "enable_chunked_prefill": False}
    assert "without chunked prefill" in (refused_by_vllm(read_engine_settings(args), args) or "")
    assert refused_by_vllm(read_engine_settings({"max_num_seqs": 8}), {}) is None


def test_the_concurrency_a_request_rate_puts_on_the_server_by_littles_law():
    spec = TuneSpec(repository=None, slo=Slo(ttft_p99_ms=1000, itl_p99_ms=40), request_rates=[2, 4], output_len=126)  # type: ignore[arg-type]
    # A request that meets the SLO takes at most 1 s + 125 x 40 ms = 6 s: 4 per second keep 24 in flight.
    assert load_concurrency(spec) == 24
    assert load_concurrency(TuneSpec(repository=None, slo=Slo(ttft_p99_ms=1), concurrency=[2, 16])) == 16  # type: ignore[arg-type]
    assert load_concurrency(TuneSpec(repository=None, slo=Slo(ttft_p99_ms=1), request_rates=[3])) is None  # type: ignore[arg-type]


def test_the_grid_measures_every_candidate_of_the_space_and_the_search_far_fewer():
    # One peak at max_num_seqs 8, max_num_batched_tokens 4096, prefix caching off: both find it.
    def score(c):
        s = c.settings
        return (
            {8: 4, 4: 2}.get(s.get("max_num_seqs"), 1)
            + {4096: 2, 2048: 1}.get(s.get("max_num_batched_tokens"), 0)
            + (1 if s.get("enable_prefix_caching") is False else 0)
        )

    def axes():
        return Axes(
            [2, 4, 8, 16],
            [1024, 2048, 4096, 8192],
            [
                Switch("enable_prefix_caching", lambda best: False),
                Switch("cudagraph_capture_sizes", lambda best: None),  # nothing to try: never combined
            ],
            [],
        )

    measured_grid: list[str] = []

    def measure(c):
        measured_grid.append(c.name)
        return Outcome(score(c), 100.0 - score(c))

    grid = Search(axes(), lambda c: None, measure)
    best_of_grid = grid.grid()
    # (4 + vLLM's default) x (4 + default) batching pairs, each with prefix caching as it is and off.
    assert len(measured_grid) == len(set(measured_grid)) == 5 * 5 * 2
    assert best_of_grid is not None
    assert best_of_grid.settings == {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": False,
    }
    best, measured, _ = run_search(axes(), score)
    assert best is not None and score(best) == score(best_of_grid)
    assert len(measured) * 3 <= len(measured_grid)  # at most a third of the grid's measurements


def confirming_search(first: dict[str, float], again: dict[str, float | None], confirmations: int):
    """A search over max_num_seqs 2, 4, 8 whose measurements give ``first`` the first time and ``again`` after
    (None: the repeat fails), returning the search and the names measured, in order."""
    measured: list[str] = []

    def measure(c):
        measured.append(f"{c.name} ({c.stage})")
        goodput = (again if c.stage == "confirm" else first)[c.name]
        return None if goodput is None else Outcome(goodput, 100.0)

    search = Search(Axes([2, 4, 8], [], [], []), lambda c: None, measure, confirmations=confirmations)
    search.run()
    return search, measured


def test_the_best_is_measured_again_and_scored_by_the_mean():
    first = {"defaults": 1.0, "max_num_seqs=2": 3.0, "max_num_seqs=8": 5.0, "max_num_seqs=4": 4.0}
    search, measured = confirming_search(first, {"max_num_seqs=8": 4.6}, confirmations=1)
    assert measured[-1] == "max_num_seqs=8 (confirm)" and len(measured) == 5
    assert search.best is not None and search.best.name == "max_num_seqs=8"
    assert search.outcomes[search.best.key()] == Outcome(4.8, 100.0)
    # Without confirmations the best is taken as measured once.
    search, measured = confirming_search(first, {}, confirmations=0)
    assert len(measured) == 4 and search.outcomes[search.best.key()] == Outcome(5.0, 100.0)  # type: ignore[union-attr]


def test_a_best_that_falls_below_another_on_its_repeat_hands_over_and_the_new_best_is_measured_again():
    first = {"defaults": 1.0, "max_num_seqs=2": 3.0, "max_num_seqs=8": 5.0, "max_num_seqs=4": 4.0}
    again = {"max_num_seqs=8": 2.0, "max_num_seqs=4": 3.8}  # 8's mean 3.5 < 4's single 4.0
    search, measured = confirming_search(first, again, confirmations=2)
    assert measured[-2:] == ["max_num_seqs=8 (confirm)", "max_num_seqs=4 (confirm)"]
    assert search.best is not None and search.best.name == "max_num_seqs=4"
    assert search.outcomes[search.best.key()] == Outcome(3.9, 100.0)
    # One confirmation only: the candidate that leads after it is taken on its single measurement.
    search, measured = confirming_search(first, again, confirmations=1)
    assert measured[-1] == "max_num_seqs=8 (confirm)"
    assert search.best is not None and search.best.name == "max_num_seqs=4"


def test_a_repeat_that_fails_scores_nothing():
    first = {"defaults": 1.0, "max_num_seqs=2": 3.0, "max_num_seqs=8": 5.0, "max_num_seqs=4": 4.0}
    search, _ = confirming_search(first, {"max_num_seqs=8": None}, confirmations=1)
    assert search.outcomes[Candidate.of({"max_num_seqs": 8}).key()] == Outcome(2.5, 100.0)
    assert search.best is not None and search.best.name == "max_num_seqs=4"


def test_the_grid_measures_each_candidate_once_whatever_the_confirmations():
    measured: list[str] = []

    def measure(c):
        measured.append(c.stage)
        return Outcome(1.0 + len(measured), 10.0)

    Search(Axes([2], [], [], []), lambda c: None, measure, confirmations=3).grid()
    assert "confirm" not in measured and len(measured) == 2
