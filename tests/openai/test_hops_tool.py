"""bench/openai_hops.py: its edits still find the code they time, and its report joins the three sources of events."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("openai_hops", REPO / "bench" / "openai_hops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def copy_of_sources(tmp_path):
    """The instrumented files, copied from this checkout (without its .git)."""
    root = tmp_path / "copy"
    for relative, _ in load_tool().EDITS:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, root / relative)
    return root


def test_every_edit_applies_to_the_current_sources_and_they_still_compile(copy_of_sources, tmp_path):
    tool = load_tool()
    tool.instrument(copy_of_sources, str(tmp_path / "hops"))
    for relative, edits in tool.EDITS:
        text = (copy_of_sources / relative).read_text()
        compile(text, relative, "exec")
        for _, new in edits:
            assert new in text


def test_the_recorder_writes_one_line_per_event(copy_of_sources, tmp_path):
    tool = load_tool()
    tool.instrument(copy_of_sources, str(tmp_path / "hops"))
    stream_socket = copy_of_sources / "vllm_repo" / "serve" / "openai" / "stream_socket.py"
    script = (
        "import runpy, sys; sys.path.insert(0, sys.argv[2]);"
        "module = runpy.run_path(sys.argv[1]); module['_hop']('GR', 7); module['_hop']('G3', 7, 42)"
    )
    subprocess.run([sys.executable, "-c", script, str(stream_socket), str(REPO)], check=True)
    (log,) = (tmp_path / "hops").glob("hops.*")
    first, second = (line.split() for line in log.read_text().splitlines())
    assert first[:2] == ["GR", "7"] and int(first[2]) > 0
    assert second == ["G3", "7", "42"]


def test_a_git_checkout_is_refused(tmp_path):
    (tmp_path / ".git").mkdir()
    with pytest.raises(SystemExit, match="git checkout"):
        load_tool().instrument(tmp_path, str(tmp_path / "hops"))


def test_an_edit_whose_code_is_gone_stops_with_that_edit(copy_of_sources, tmp_path):
    app = copy_of_sources / "vllm_repo" / "serve" / "openai" / "app.py"
    app.write_text(app.read_text().replace("shared = model in self._socket_readers", "shared = False"))
    with pytest.raises(SystemExit, match="no longer applies"):
        load_tool().instrument(copy_of_sources, str(tmp_path / "hops"))


def write_events(directory: Path, process: str, lines: list[tuple[str, str, int]]) -> None:
    directory.mkdir(exist_ok=True)
    with open(directory / f"hops.{process}", "a") as out:
        out.writelines(f"{tag} {key} {ns}\n" for tag, key, ns in lines)


def test_the_report_joins_gateway_backend_and_triton_events_per_request(tmp_path, capsys):
    """Two requests on the shared stream, 1 ms apart at every hop for the first and 2 ms for the second; the medians
    are the means of the two."""
    hops = tmp_path / "hops"
    for index, (stream, triton_id, step) in enumerate((("1", "ab-1", 1_000_000), ("2", "ab-2", 2_000_000))):
        t0 = (index + 1) * 10**9
        at = [t0 + k * step for k in range(16)]
        write_events(hops, "100", [("G1", stream, at[1]), ("GI", triton_id, at[1]), ("G2", triton_id, at[2])])
        write_events(hops, "100", [("G0", stream, at[0])])
        write_events(
            hops,
            "200",
            [(tag, stream, at[k]) for k, tag in ((6, "B0"), (7, "B1"), (8, "B2"), (9, "B3"), (10, "B4"), (11, "B4"))],
        )
        write_events(hops, "100", [("GR", stream, at[12]), ("G3", stream, at[13]), ("G4", stream, at[14])])
        write_events(hops, "100", [("G3", stream, at[14]), ("G4", stream, at[15])])
        trace = [{"id": index, "model_name": "tiny", "request_id": triton_id}] + [
            {"id": index, "timestamps": [{"name": name, "ns": at[k]}]}
            for k, name in ((3, "GRPC_WAITREAD_END"), (4, "QUEUE_START"), (5, "COMPUTE_START"))
        ]
        (hops / f"trace.txt.{index}").write_text(json.dumps(trace))
    medians = load_tool().report(str(hops), skip=0)
    assert "2 requests" in capsys.readouterr().out
    for label, _ in load_tool().HOPS[:-2]:
        if label == "the first chunk to the gateway's read of it":
            assert medians[label] == pytest.approx(3.0)  # B4 at step 10, GR at step 12
        else:
            assert medians[label] == pytest.approx(1.5), label
    assert medians["total: handler to the first content written"] == pytest.approx(15 * 1.5)
    # Outside vLLM: handler to task (8 steps) and first chunk to first bytes written (4 steps).
    assert medians["outside vLLM"] == pytest.approx(12 * 1.5)
