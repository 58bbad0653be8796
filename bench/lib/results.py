"""Result files: one JSON document per run, named after the benchmark and the time it started, and the partial one a
long run rewrites as it goes (what was measured so far stays if the run is cut short)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def stamp() -> str:
    """The time now, as result files name it: 20261206T071500."""
    return time.strftime("%Y%m%dT%H%M%S")


class ResultFile:
    """``out/PREFIX_STAMP.json``, and beside it ``out/PREFIX_STAMP.partial.json`` while the run goes on."""

    def __init__(self, out: Path | str, prefix: str, indent: int = 1, newline: bool = False) -> None:
        self.out = Path(out)
        self.prefix = prefix
        self.started = stamp()
        self.indent = indent
        self.newline = newline

    @property
    def path(self) -> Path:
        return self.out / f"{self.prefix}_{self.started}.json"

    @property
    def partial_path(self) -> Path:
        return self.out / f"{self.prefix}_{self.started}.partial.json"

    def _write(self, path: Path, document: Any) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=self.indent) + ("\n" if self.newline else ""))
        return path

    def write(self, document: Any) -> Path:
        return self._write(self.path, document)

    def write_partial(self, document: Any) -> Path:
        return self._write(self.partial_path, document)
