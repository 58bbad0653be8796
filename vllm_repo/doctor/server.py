"""doctor --url: a running server's own account (readiness, and each model's state and reason from the repository
index), and, for a server on this machine, the log it writes: the file its stdout goes to (`vllm-repo launch` and
`tritonserver > log` both have one)."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from vllm_repo.errors import UsageError
from vllm_repo.serve.errors import InferError, TritonAnswerError, TritonUnreachable
from vllm_repo.serve.triton_client import ModelEntry, TritonHttp

INDEX_TIMEOUT_S = 5.0
LIVE_TIMEOUT_S = 2.0


def repository_index(url: str) -> list[ModelEntry] | None:
    """Triton's repository index: every model with its state ("READY", "UNAVAILABLE", ...) and reason. None when the
    server answers /v2/health/live but its index gives no answer in INDEX_TIMEOUT_S: Triton 2.51's index can wait
    behind a model load that hangs (doctor's VD116)."""
    try:
        return TritonHttp(url, INDEX_TIMEOUT_S).repository_index()
    except TritonUnreachable as exc:
        if server_live(url):
            return None
        raise UsageError(
            f"{url}: no Triton server answers ({exc.reason})",
            hint="give the server's HTTP address (default port 8000), or the log file: `vllm-repo doctor LOG`",
        ) from None
    except TritonAnswerError as exc:
        what = f"answered HTTP {exc.status}" if exc.status != 200 else "is not JSON"
        raise UsageError(f"{url}: the repository index {what}", hint="is it a Triton server?") from None
    except InferError as exc:  # not an http(s) URL
        raise UsageError(exc.message, hint=exc.hint) from None


def server_live(url: str) -> bool:
    """Whether the server at ``url`` answers /v2/health/live with 200."""
    try:
        return TritonHttp(url, LIVE_TIMEOUT_S).server_live()
    except TritonUnreachable:
        return False


def index_as_log(models: list[ModelEntry]) -> str:
    """The index's failures as the log lines Triton writes for them, so the causes read both alike."""
    return "\n".join(
        f"failed to load '{m.name}' version {m.version or 1}: {m.reason}"
        for m in models
        if m.state not in ("READY", "LOADING", "UNLOADING") and m.reason
    )


def local_log_of(url: str) -> Path | None:
    """The log file of the server listening at ``url`` when it runs on this machine and writes its output to a file
    (Linux: the listening socket's process, then where that process's stdout goes)."""
    parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or parsed.port is None:
        return None
    inodes = _listening_inodes(parsed.port)
    if not inodes:
        return None
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return _output_file(pid)
    return None


def _listening_inodes(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(fields[9])
    return found


def _output_file(pid: str) -> Path | None:
    for fd in ("1", "2"):
        try:
            target = Path(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if target.is_file():
            return target
    return None
