"""load_hang.py: which loads a Triton log shows finished by the backend and not by Triton, and when that is a hang.
The lines are Triton 2.51's and the bundled backend's own (tests/doctor/real_logs/load-never-finished-1.log is a whole
log of the hang)."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.launch import _wait_ready
from vllm_repo.serve.load_hang import LoadHangWatch, LoadTracker
from vllm_repo.serve.shm_watch import SharedMemoryWatch

LOADING = 'I1206 21:34:01.604008 1184 model_lifecycle.cc:472] "loading: {model}:1"'
INSTANCE = 'I1206 21:34:03.175 1184 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: {name} (CPU device 0)"'
READY = 'I1206 21:34:34.029318 1184 log.py:15] "[vllm] model {model} ready (vLLM 0.32.0)"'
LOADED = "I1206 21:34:34.031000 1184 model_lifecycle.cc:849] \"successfully loaded '{model}'\""
FAILED = "E1206 21:34:34.031000 1184 model_lifecycle.cc:654] \"failed to load '{model}' version 1: boom\""


def waiting(*lines: str) -> list[tuple[str, int]]:
    tracker = LoadTracker()
    tracker.feed(lines)
    return [(w.model, w.ready_line) for w in tracker.waiting()]


def test_a_model_whose_instances_all_said_ready_waits_until_triton_says_loaded_or_failed():
    started = [LOADING.format(model="m"), INSTANCE.format(name="m_0"), "(EngineCore) INFO ...", READY.format(model="m")]
    assert waiting(*started) == [("m", 4)]
    assert waiting(*started, LOADED.format(model="m")) == []
    assert waiting(*started, FAILED.format(model="m")) == []


def test_a_model_with_an_instance_still_loading_is_not_waiting():
    lines = [LOADING.format(model="m"), INSTANCE.format(name="m_0_0"), INSTANCE.format(name="m_0_1")]
    assert waiting(*lines, READY.format(model="m")) == []
    assert waiting(*lines, READY.format(model="m"), READY.format(model="m")) == [("m", 5)]


def test_an_instance_belongs_to_the_longest_model_name_that_prefixes_it():
    loading = [LOADING.format(model="a"), LOADING.format(model="a_b")]
    lines = [*loading, INSTANCE.format(name="a_0"), INSTANCE.format(name="a_b_0")]
    assert waiting(*lines, READY.format(model="a")) == [("a", 5)]  # a_b's instance is not counted as a's
    assert waiting(*lines, READY.format(model="a_b")) == [("a_b", 5)]


def test_a_reload_starts_afresh_and_a_ready_line_with_no_instance_seen_is_no_evidence():
    first = [LOADING.format(model="m"), INSTANCE.format(name="m_0"), READY.format(model="m")]
    assert waiting(*first, LOADING.format(model="m"), INSTANCE.format(name="m_0")) == []
    assert waiting(READY.format(model="m")) == []


def test_the_watch_follows_a_growing_log_and_names_a_hang_only_after_its_wait(tmp_path: Path):
    log, now = tmp_path / "tritonserver.log", [0.0]
    log.write_bytes(b"earlier run's lines\n")
    watch = LoadHangWatch(log, start=log.stat().st_size, after_s=90, clock=lambda: now[0])
    with log.open("a") as out:
        out.write(f"{LOADING.format(model='m')}\n{INSTANCE.format(name='m_0')}\n{READY.format(model='m')[:30]}")
        out.flush()
        assert watch.hung() is None  # half a line: not read yet
        out.write(READY.format(model="m")[30:] + "\n")
        out.flush()
        now[0] = 10.0
        assert watch.hung() is None  # first seen waiting now
        now[0] = 99.0
        assert watch.hung() is None  # 89 s
        now[0] = 100.5
        hung = watch.hung()
        # line 4 of the file: the earlier run's line comes first
        assert hung is not None and (hung.model, hung.ready_line, round(hung.waited_s, 1)) == ("m", 4, 90.5)
        out.write(LOADED.format(model="m") + "\n")
        out.flush()
        assert watch.hung() is None


def test_a_load_that_triton_finishes_in_time_is_never_a_hang(tmp_path: Path):
    log, now = tmp_path / "tritonserver.log", [0.0]
    watch = LoadHangWatch(log, after_s=90, clock=lambda: now[0])
    assert watch.hung() is None  # no log yet
    log.write_text("\n".join([LOADING.format(model="m"), INSTANCE.format(name="m_0"), READY.format(model="m")]) + "\n")
    assert watch.hung() is None
    with log.open("a") as out:
        out.write(LOADED.format(model="m") + "\n")
    now[0] = 1000.0
    assert watch.hung() is None


class _HungServer:
    """What launch's wait asks of a server: running, never ready, a watch of its log."""

    def __init__(self, log_path: Path) -> None:
        self.log_path, self.log_start = log_path, 0

    def is_running(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return False

    def load_hang_watch(self, after_s: float) -> LoadHangWatch:
        return LoadHangWatch(self.log_path, self.log_start, after_s)


def test_launch_names_the_hang_instead_of_waiting_its_whole_ready_timeout(tmp_path: Path):
    log = tmp_path / "tritonserver.log"
    log.write_text("\n".join([LOADING.format(model="m"), INSTANCE.format(name="m_0"), READY.format(model="m")]) + "\n")
    out = io.StringIO()
    began = time.monotonic()
    with pytest.raises(LaunchError, match=r"not finished loading 'm' \d+ s after its backend said it was ready") as hit:
        plan = SimpleNamespace(models=["m"], server=SimpleNamespace(describe=lambda: "tritonserver"))
        _wait_ready(_HungServer(log), plan, out, 600, SharedMemoryWatch(os.getpgid(0)), load_hang_s=0.3)
    assert time.monotonic() - began < 30
    assert hit.value.log_path == log and "restart" in (hit.value.hint or "") and str(log) in (hit.value.hint or "")
