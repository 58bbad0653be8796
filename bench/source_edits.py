"""Timestamps added to a throwaway copy of the project, for the hop benchmarks (openai_hops.py, native_hops.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ANCHOR = "from __future__ import annotations\n"


def apply_edits(root: Path, edits: list[tuple[str, list[tuple[str, str]]]], recorder: str) -> None:
    """Put ``recorder`` after each file's `from __future__` line and make its edits, (code as it is, the code with its
    timestamp). A git checkout is refused (the edits are for measuring, never for committing), and an edit whose code
    is not there exactly once stops it, naming that code."""
    if (root / ".git").exists():
        sys.exit(f"{root} is a git checkout: instrument a copy of it (git archive HEAD | tar -x -C COPY)")
    for relative, changes in edits:
        path = root / relative
        text = path.read_text()
        if ANCHOR not in text:
            sys.exit(f"{relative}: no `{ANCHOR.strip()}` to put the recorder after")
        text = text.replace(ANCHOR, ANCHOR + recorder, 1)
        for old, new in changes:
            if text.count(old) != 1:
                sys.exit(f"{relative}: this edit no longer applies, the code it expects is gone:\n{old}")
            text = text.replace(old, new, 1)
        path.write_text(text)
        print(f"instrumented {relative}")
