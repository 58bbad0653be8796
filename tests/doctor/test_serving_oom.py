"""An engine that died of the GPU's memory under load (three engines overcommitting one GPU, ENGINE_PROCESS): doctor
names the out-of-memory error, twenty lines above the backend's line that the engine died, as a failure while
serving, not at load."""

from __future__ import annotations

from pathlib import Path

from vllm_repo.doctor import diagnose_file

HERE = Path(__file__).parent


def test_an_out_of_memory_error_under_load_is_the_root_cause_while_serving():
    path = HERE / "written_logs" / "cuda-oom-serving-1.log"
    diagnosis = diagnose_file(path)
    assert diagnosis.root.code == "VD106"
    assert "while the model served requests" in diagnosis.root.message
    assert "1.75 GiB more on GPU 0" in diagnosis.root.message
    line = path.read_text().split("\n")[diagnosis.root.line - 1]
    assert "OutOfMemoryError" in line
    assert "--pack all --write" in diagnosis.root.hint


def test_an_out_of_memory_error_at_load_is_still_said_to_be_at_load():
    diagnosis = diagnose_file(HERE / "public_logs" / "cuda-oom-load-2.log")
    assert diagnosis.root.code == "VD106"
    assert "while the model loaded" in diagnosis.root.message
