"""The estimate against real vLLM start-ups from public logs (bench/estimate_accuracy.py): computed here."""

from __future__ import annotations

from bench import estimate_accuracy


def load_bench():
    return estimate_accuracy


def test_median_kv_token_error_meets_the_target():
    bench = load_bench()
    result = bench.evaluate()
    assert result["complete_entries"] >= 10
    assert result["median_token_error"] <= bench.TARGET_MEDIAN_TOKEN_ERROR == 0.05
    assert result["median_kv_gib_error"] <= 0.05


def test_weights_from_the_architecture_match_the_logged_loading():
    """Weights come from config.json alone, not from the logs: within 3% of vLLM's 'model loading' per rank."""
    rows = [r for r in load_bench().evaluate()["rows"] if r["logged_weights_gib"]]
    assert len(rows) >= 8
    for row in rows:
        assert abs(row["predicted_weights_gib"] / row["logged_weights_gib"] - 1) < 0.03, row
