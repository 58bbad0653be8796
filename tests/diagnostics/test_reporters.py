"""The findings package on its own: counts by severity, and GitHub annotations escaped once for every command (a
message GitHub would cut at a newline, a file name it would split at a comma or a colon)."""

from __future__ import annotations

import io

from vllm_repo.diagnostics import Diagnostic, Severity, count_by_severity
from vllm_repo.diagnostics.reporters import REPORTERS, github_annotation


def finding(**kwargs) -> Diagnostic:
    fields = {"code": "VR301", "severity": Severity.WARNING, "file": "m/1/model.json", "message": "bad", **kwargs}
    return Diagnostic(**fields)


def test_counts_name_every_severity():
    found = [finding(), finding(severity=Severity.ERROR), finding()]
    assert count_by_severity(found) == {"error": 1, "warning": 2, "info": 0}
    assert count_by_severity([]) == {"error": 0, "warning": 0, "info": 0}


def test_an_annotation_escapes_its_properties_and_its_message():
    d = finding(file="logs/a,b:c.log", line=3, column=7, message="50% of\nthe card", hint="lower it")
    assert github_annotation(d) == (
        "::warning file=logs/a%2Cb%3Ac.log,line=3,col=7,title=vllm-repo VR301::50%25 of%0Athe card (hint: lower it)"
    )


def test_an_annotation_without_a_place_or_hint_and_with_doctors_label():
    assert github_annotation(finding(file=None, severity=Severity.INFO)) == "::notice title=vllm-repo VR301::bad"
    d = finding(code="VD101", severity=Severity.ERROR, file="server.log", line=9, hint="upgrade")
    assert (
        github_annotation(d, hint_label="fix")
        == "::error file=server.log,line=9,title=vllm-repo VD101::bad (fix: upgrade)"
    )


class Found:
    """What a command found, as the reporters take it."""

    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics

    def summary(self) -> dict[str, int]:
        return count_by_severity(self.diagnostics)

    def summary_lines(self, brief: bool) -> list[str]:
        return ["brief" if brief else "in full"]


def test_each_reporter_writes_the_findings_and_its_summary():
    found = Found([finding(line=2, column=5, hint="fix it")])
    outputs = {}
    for name, reporter in REPORTERS.items():
        out, err = io.StringIO(), io.StringIO()
        reporter(found, out, err)
        outputs[name] = (out.getvalue(), err.getvalue())
    assert outputs["text"] == ("m/1/model.json:2:5: warning[VR301] bad\n    hint: fix it\n", "in full\n")
    assert outputs["github"][1] == "brief\n" and outputs["github"][0].startswith("::warning file=m/1/model.json,")
    assert '"summary": {\n    "error": 0,\n    "warning": 1' in outputs["json"][0] and outputs["json"][1] == ""
