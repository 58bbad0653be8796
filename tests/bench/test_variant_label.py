"""bench/backend_throughput.py records a --backend-variant's directory without the machine's paths."""

from __future__ import annotations

from bench.backend_throughput import _variant_label


def test_a_variant_inside_the_tree_is_recorded_relative_and_one_outside_by_its_name(tmp_path, monkeypatch):
    inside = tmp_path / "tree" / ".gpuroute" / "variants" / "before"
    inside.mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "tree")
    assert _variant_label(f"before={inside}") == "before=.gpuroute/variants/before"
    assert _variant_label("prio=/elsewhere/variants/prio") == "prio=prio"
