"""bench/native_hops.py: its edits still find the backend code and benchmark code they time, and its report splits the
streams' time as its events say."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("native_hops", REPO / "bench" / "native_hops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_edit_applies_to_the_current_sources_and_a_variant_directory(tmp_path):
    tool = load_tool()
    root = tmp_path / "copy"
    for relative, _ in tool.EDITS:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, root / relative)
    variant = tmp_path / "variant"
    variant.mkdir()
    shutil.copy(REPO / "vllm_repo" / "backend" / "model.py", variant / "model.py")
    tool.instrument(root, str(tmp_path / "hops"), [variant])
    backend_edits = dict(tool.EDITS)["vllm_repo/backend/model.py"]
    for path, edits in [*((root / r, e) for r, e in tool.EDITS), (variant / "model.py", backend_edits)]:
        text = path.read_text()
        compile(text, str(path), "exec")
        for _, new in edits:
            assert new in text


def test_a_git_checkout_is_refused(tmp_path):
    (tmp_path / ".git").mkdir()
    with pytest.raises(SystemExit, match="git checkout"):
        load_tool().instrument(tmp_path, str(tmp_path / "hops"))


def test_the_report_splits_the_streams_time(tmp_path):
    """Two streams over 1 s, one request each: 100 ms from execute() to vLLM, 700 ms inside, 50 ms to send the final;
    the rest (150 ms) is outside the stub."""
    ms = 1_000_000
    lines = [
        f"R triton_http:2:1 {0}",
        f"R triton_http:2:1 {1000 * ms}",
        f"R raw:2:1 {2000 * ms}",
        f"R raw:2:1 {3000 * ms}",
    ]
    for request in ("a", "b"):
        for tag, at in (("X", 10), ("A", 40), ("E", 110), ("O", 300), ("S", 320), ("O", 810), ("F", 860)):
            lines.append(f"{tag} {request} {at * ms}")
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops.1").write_text("\n".join(lines) + "\n")
    (row,) = load_tool().report(str(hops), None)  # raw's measurement has no stub events: no row
    assert row["requests"] == 2 and row["streams"] == 2
    assert row["share_of_stream_time"] == {
        "inside_vllm": 0.7,
        "stub_before_vllm": 0.1,
        "stub_after_vllm": 0.05,
        "outside_the_stub": 0.15,
    }
    assert row["ms"]["admitted_to_vllm"]["median"] == 70
    assert row["ms"]["first_output_to_sent"]["median"] == 20
    assert row["responses_per_request"] == 2
