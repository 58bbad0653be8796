"""Writing a file so that a reader sees the old content or the new, never half of it: a temporary file beside it,
then one rename. Only the standard library: schema/generate.py uses it inside other interpreters."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: str | bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8). The file keeps the permissions it had; a new one
    gets ``mode``, or what the umask gives an ordinary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, mode)  # mkstemp makes the file private
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
