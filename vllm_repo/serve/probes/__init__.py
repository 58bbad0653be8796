"""Probes: scripts run by path in the serving Python to learn what it has (its version, numpy, vLLM, Ray and the Ray
cluster it reaches). That interpreter need not be the one running vllm-repo, and importing vLLM or Ray here would
take seconds or be impossible, so everything about it is learnt by running it.

Each probe is a script of the standard library alone (it runs with none of vllm-repo importable) that prints its
answer as one line, ``MARK`` followed by a JSON object; ``run_probe`` runs one and reads that line, whatever else the
interpreter or the libraries it imports print around it. python_probe.py: the interpreter and its packages
(serve/python_env.py); ray_probe.py: the vLLM build and the Ray cluster (serve/ray_cluster.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Each script spells it too: they can't import it.
MARK = "VLLM_REPO_PROBE "
PYTHON_PROBE = "python_probe.py"
RAY_PROBE = "ray_probe.py"


def probe_path(script: str) -> Path:
    """The file of a probe shipped in this package."""
    return Path(__file__).resolve().parent / script


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What a probe said: its answer, or why there is none (``failure``)."""

    answer: dict[str, Any] | None  # the last MARK line's JSON object
    returncode: int | None  # None when it could not start or was cut off
    timed_out: bool
    stderr: str
    failure: str | None  # "exit status 1: <its last line on stderr>", "no answer within 60 s", the OSError...

    @property
    def last_error_line(self) -> str:
        return (self.stderr.strip().splitlines() or ["no output"])[-1]


def run_probe(
    python: str | os.PathLike,
    script: str,
    args: Sequence[str] = (),
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    isolated: bool = False,
) -> ProbeResult:
    """Run the probe ``script`` (a file of this package) with ``python`` and ``args``; ``isolated`` runs it with
    ``-I`` (no PYTHON* variables, no user site-packages: what the interpreter has of its own)."""
    command = [str(python), *(["-I"] if isolated else []), str(probe_path(script)), *args]
    try:
        # Its own process group: on a timeout the probe and anything it started (Ray's helpers) go together.
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return ProbeResult(None, None, False, "", str(exc))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return ProbeResult(None, None, True, "", f"no answer within {timeout:g} s")
    said = [line[len(MARK) :] for line in out.splitlines() if line.startswith(MARK)]
    answer = None
    failure = None
    if said:
        try:
            answer = json.loads(said[-1])
        except ValueError as exc:
            failure = f"its answer is not JSON ({exc})"
        else:
            if not isinstance(answer, dict):
                answer, failure = None, "its answer is not a JSON object"
    result = ProbeResult(answer, proc.returncode, False, err, failure)
    if answer is None and failure is None:
        return dataclasses.replace(result, failure=f"exit status {proc.returncode}: {result.last_error_line}")
    return result
