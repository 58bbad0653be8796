"""doctor as a library call (vllm_repo.doctor.run), the causes read from the table of one-pattern causes, and the
GitHub annotations of a diagnosis escaped as validate's are."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllm_repo.doctor import CAUSES, ServerLog, diagnose, diagnose_file, run
from vllm_repo.doctor.causes import MATCH_CAUSES
from vllm_repo.doctor.report import report
from vllm_repo.errors import UsageError

HERE = Path(__file__).parent


def test_run_needs_a_log_or_an_address():
    with pytest.raises(UsageError, match="give the server's log or its address"):
        run()


def test_run_on_a_log_is_its_diagnosis_with_the_repository_named_in_the_hints(tmp_path):
    log = HERE / "real_logs" / "bad-key-1.log"
    plain = diagnose_file(log)
    diagnosis = run(log, repository=tmp_path / "my repo")
    assert [d.code for d in diagnosis.findings] == [d.code for d in plain.findings] == ["VD101"]
    assert "REPO" in (plain.root.hint or "")
    assert "'" + str(tmp_path / "my repo") + "'" in (diagnosis.root.hint or "")
    assert diagnosis.failed


def test_every_row_of_the_table_is_a_registered_cause_that_fires_on_its_first_match():
    for row in MATCH_CAUSES:
        assert CAUSES[row.code].name == row.name
        assert CAUSES[row.code].summary == row.doc
    log = ServerLog("I0101 starting\nE0101 current platform cpu does not support ray\n")
    (found,) = [d for d in diagnose(log).findings if d.code == "VD113"]
    assert "vLLM's cpu platform has no Ray executor" in found.message and found.line == 2


def test_a_diagnosis_as_github_annotations_escapes_the_file_name_and_the_message(tmp_path):
    log = tmp_path / "server,1.log"
    shutil.copy(HERE / "real_logs" / "bad-key-1.log", log)
    annotations = report(diagnose_file(log), github=True)
    first = annotations.splitlines()[0]
    assert first.startswith("::error file=") and "server%2C1.log,line=" in first
    assert ",title=vllm-repo VD101::" in first and "(fix: " in first
