"""The real log of a load Triton 2.51 never finished (tests/doctor/real_logs/load-never-finished-1.log, VD116): the
backend said the model was ready, and Triton never said it loaded."""

from __future__ import annotations

from pathlib import Path

HUNG_LOG = Path(__file__).parent.parent / "doctor" / "real_logs" / "load-never-finished-1.log"
READY_HEADER = "I1206 21:34:34.029318"  # the header of the backend's ready line in it


def hung_log_lines() -> tuple[list[str], int]:
    """The log's lines, and the index of the backend's ready line."""
    lines = HUNG_LOG.read_text().split("\n")
    ready = next(i for i, line in enumerate(lines) if "[vllm] model vllm_model ready" in line)
    assert lines[ready].startswith(READY_HEADER)
    return lines, ready
