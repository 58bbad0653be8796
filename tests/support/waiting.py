"""Waiting in tests for what another thread or process does, with a deadline rather than a fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.005) -> None:
    """Return once ``condition()`` is true; fail the test if it is not within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout:g} s"
        time.sleep(interval)
