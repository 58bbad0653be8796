"""Checks on what the sizing commands print and write, shared by the tests of estimate, plan, init and validate: no
part larger than its whole, fractions of one GPU that leave plan's margin, and commands that run as printed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
# "57.1 GiB of 41.7 GiB", "0.5 GiB of a 13.2 GiB budget", "2.80 GiB of 20.90 GiB usable": a part, then its whole.
PART_OF_WHOLE = re.compile(rf"({_NUMBER})\s*(GiB|MiB|GB)?\s+of\s+(?:an?\s+|the\s+)?({_NUMBER})\s*(GiB|MiB|GB)\b")
# vLLM's own wording for a KV cache too small for one sequence: what is needed, then what is there.
NEEDED_AVAILABLE = re.compile(
    rf"\(({_NUMBER}) (GiB|MiB) KV cache is needed, which is larger than the available KV cache memory "
    rf"\(({_NUMBER}) (GiB|MiB)\)"
)
_IN_GIB = {"GiB": 1.0, "MiB": 1 / 1024, "GB": 1e9 / 2**30, None: 1.0}
COMMAND = re.compile(r"`(vllm-repo [^`]+)`")


def _value(number: str, unit: str | None) -> float:
    return float(number.replace(",", "")) * _IN_GIB[unit]


def parts_larger_than_wholes(text: str) -> list[str]:
    """Every "X of Y" in ``text`` whose X, as printed, is larger than its Y; and every "X needed ... larger than Y"
    whose X, as printed, is not larger than Y."""
    wrong = []
    for match in PART_OF_WHOLE.finditer(text):
        part, part_unit, whole, whole_unit = match.groups()
        if _value(part, part_unit or whole_unit) > _value(whole, whole_unit) + 1e-9:
            wrong.append(match.group(0))
    for match in NEEDED_AVAILABLE.finditer(text):
        needed, needed_unit, available, available_unit = match.groups()
        if _value(needed, needed_unit) <= _value(available, available_unit):
            wrong.append(match.group(0))
    return wrong


def commands_in(text: str) -> list[str]:
    """The vllm-repo commands a text prints between backticks."""
    return COMMAND.findall(text)


def run_as_printed(command: str, cwd: Path):  # -> click.testing.Result
    """Run a printed `vllm-repo ...` command, exactly as printed, from ``cwd`` (in this process)."""
    import os

    from vllm_repo.cli import build_app

    argv = shlex.split(command)
    assert argv[0] == "vllm-repo", command
    before = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(build_app(), argv[1:])
    finally:
        os.chdir(before)
