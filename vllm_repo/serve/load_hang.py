"""A model load that Triton never finishes after the bundled backend said the model was ready.

Triton 2.51's Python backend, on a CPU starved for a second or more, can miss its stub's answer to the load (its
health check of the stub fails meanwhile); it then waits for that stub, initialized and waiting for work, to exit,
which it never does: the load never ends and the server never becomes ready. Its mark in the log: every instance
Triton started of a model ("TRITONBACKEND_ModelInstanceInitialize: NAME_0 (...)") has the backend's
"[vllm] model NAME ready" line, and Triton's "successfully loaded 'NAME'", which follows a healthy load within
milliseconds, never comes. Only a restart ends it. ``LoadTracker`` reads that state from the log's lines,
``LoadHangWatch`` follows a growing log and says when it has lasted ``LOAD_HANG_S``, and doctor reads it from a log
that went on (a stop) long after.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

# Triton's lines (as its log quotes them) and the bundled backend's (vllm_repo/backend/model.py).
_LOADING = re.compile(r'"loading: (?P<model>[^:"]+):\d+"')
_INSTANCE = re.compile(r"TRITONBACKEND_ModelInstanceInitialize: (?P<instance>\S+) \(")
_READY = re.compile(r"\[vllm\] model (?P<model>\S+) ready\b")
_SETTLED = re.compile(r"successfully loaded '(?P<loaded>[^']+)'|failed to load '(?P<failed>[^']+)'")
# A healthy load is marked loaded within milliseconds of its last instance's ready line; on 2 busy cores it has not
# been seen to take a second. A minute and a half of nothing is the hang, with room to spare.
LOAD_HANG_S = 90.0


@dataclasses.dataclass
class _Load:
    instances: int = 0
    ready: int = 0
    ready_line: int = 0  # 1-based, of the latest ready line


@dataclasses.dataclass(frozen=True)
class WaitingModel:
    """A model whose every started instance said ready and that Triton has not yet said loaded (or failed)."""

    model: str
    ready_line: int  # 1-based line of the log file of its last ready line
    waited_s: float = 0.0  # since it was first seen waiting


class LoadTracker:
    """The loads a Triton log shows in progress, line by line."""

    def __init__(self) -> None:
        self._loads: dict[str, _Load] = {}
        self.lines = 0

    def feed(self, lines: Iterable[str]) -> None:
        for text in lines:
            self.lines += 1
            if m := _LOADING.search(text):
                self._loads[m["model"]] = _Load()  # a (re)load starts afresh
            elif m := _INSTANCE.search(text):
                owner = self._owner(m["instance"])
                if owner is not None:
                    self._loads[owner].instances += 1
            elif m := _READY.search(text):
                load = self._loads.setdefault(m["model"], _Load())
                load.ready += 1
                load.ready_line = self.lines
            elif m := _SETTLED.search(text):
                self._loads.pop(m["loaded"] or m["failed"], None)

    def _owner(self, instance: str) -> str | None:
        # Triton names a model's instances NAME_<group>_<n> or NAME_<n>; of models "a" and "a_b", instance "a_b_0" is
        # a_b's (the longest name that prefixes it).
        owners = [model for model in self._loads if instance.startswith(model + "_")]
        return max(owners, key=len) if owners else None

    def waiting(self) -> list[WaitingModel]:
        return [
            WaitingModel(model, load.ready_line)
            for model, load in self._loads.items()
            if load.instances >= 1 and load.ready >= load.instances
        ]


class LoadHangWatch:
    """Follows a server's log from byte ``start`` while it loads; ``hung()`` names a model that has waited for Triton
    ``after_s`` seconds since its backend said ready, None otherwise."""

    def __init__(
        self,
        log_path: Path,
        start: int = 0,
        after_s: float = LOAD_HANG_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log_path, self.after_s, self._clock = log_path, after_s, clock
        self._offset, self._partial = start, b""
        self._tracker = LoadTracker()
        self._tracker.lines = _lines_before(log_path, start)  # a log appended to, run after run: the file's numbers
        self._since: dict[str, float] = {}  # model -> when it was first seen waiting

    def hung(self) -> WaitingModel | None:
        self._read()
        now = self._clock()
        waiting = self._tracker.waiting()
        self._since = {w.model: self._since.get(w.model, now) for w in waiting}
        return next(
            (dataclasses.replace(w, waited_s=now - self._since[w.model]) for w in waiting
             if now - self._since[w.model] >= self.after_s),
            None,
        )  # fmt: skip

    def _read(self) -> None:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                chunk = log.read()
        except OSError:
            return
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        self._tracker.feed(line.decode("utf-8", "replace") for line in complete)


def _lines_before(log_path: Path, offset: int) -> int:
    if offset == 0:
        return 0
    try:
        with open(log_path, "rb") as log:
            return log.read(offset).count(b"\n")
    except OSError:
        return 0


def hang_message(waiting: WaitingModel) -> str:
    return (
        f"Triton has not finished loading '{waiting.model}' {waiting.waited_s:.0f} s after its backend said it was "
        "ready: Triton 2.51's Python backend can lose its stub's answer on a CPU too busy to answer its health "
        "check, and then waits for good"
    )


HANG_HINT = (
    "nothing ends it but a restart: stop the server and start it again (a CPU with cores to spare, fewer models "
    "loading at once, avoids it)"
)
