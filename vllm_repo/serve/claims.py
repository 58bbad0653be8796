"""What a server takes from the machine that another server on it could take too, claimed so that each gets its own.

- Ports: a port picked because it is free now is free for every other process too until our server binds it. Each
  vllm-repo process holds the ports it picked or was given with a lock file per port (``flock``, in a directory all
  vllm-repo processes on the machine share) until its server stops; others pass over a held port, or are told who
  is about to take it. The kernel drops a lock with the process that held it, so a killed launch holds nothing.
- Triton's Python backend directory: the backend makes ``/tmp/python_env_XXXXXX`` when it is loaded (a fixed place:
  it does not read TMPDIR) and removes it as the server shuts down, aborting the server (``fts_read error``) when it is
  already gone. A server killed before it shut down leaves it; only that server's own may then be removed. Which one
  is its own is known by making it under a lock: a server starts while it holds the machine's python_env lock, and
  the one directory that appears before the lock is let go is its own (a server started with no model loaded makes
  it at its first load, which TritonServer.load_model starts under the lock the same way). Two appearing at once (a
  Triton server that vllm-repo did not start): none is claimed, and none removed. A claimed directory is held (a
  lock file named after it) until its server has stopped, so that any vllm-repo process can tell a live server's
  directory from one left behind (``unclaimed_python_envs``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from vllm_repo.serve.errors import TritonServerError

# Not under TMPDIR: the claims are of things every process on the machine shares, whatever its TMPDIR.
SHARED_LOCK_DIRECTORY = Path("/tmp/vllm-repo-locks")
PYTHON_ENV_DIRS = "/tmp/python_env_*"
# How long a starting server may hold the python_env lock waiting for its directory to appear (it appears within a
# second of the start on a CPU machine; the GPU's initialisation comes first on a GPU host).
PYTHON_ENV_WAIT_S = 30.0


def lock_directory() -> Path:
    """The shared directory of lock files, made world-writable and sticky like /tmp (every user's servers share the
    ports); VLLM_REPO_LOCK_DIR moves it."""
    path = Path(os.environ.get("VLLM_REPO_LOCK_DIR") or SHARED_LOCK_DIRECTORY)
    try:
        path.mkdir(mode=0o777, exist_ok=True)
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode):
            raise OSError(errno.ENOTDIR, "not a directory", str(path))
        if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o1777:
            path.chmod(0o1777)
    except OSError as exc:
        raise TritonServerError(
            f"cannot use {path} for vllm-repo's lock files: {exc.strerror or exc}",
            hint="make it a directory every user can write to (mode 1777), or point VLLM_REPO_LOCK_DIR elsewhere",
        ) from exc
    return path


def _try_lock(path: Path, blocking: bool = False) -> int | None:
    """An open descriptor holding ``path``'s exclusive lock, or None when another process holds it. The file is
    checked to be still the one locked (a holder that let go removes it)."""
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # removed by its holder as we took it: take the new one


def _unlock(path: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        path.unlink()  # first, while held: whoever opens it next makes a new one
    os.close(fd)


# -- ports -----------------------------------------------------------------------------------------------------------


class _Held:
    def __init__(self, fd: int) -> None:
        self.fd, self.count = fd, 1


# This process's port locks: a port taken twice here (picked by bench, then given to its server) is one lock.
_held_ports: dict[int, _Held] = {}


def _port_lock(port: int) -> Path:
    return lock_directory() / f"port-{port}.lock"


def hold_port(port: int) -> bool:
    """Hold ``port`` for this process (once more, if it holds it already); False when another process holds it."""
    held = _held_ports.get(port)
    if held is not None:
        held.count += 1
        return True
    fd = _try_lock(_port_lock(port))
    if fd is None:
        return False
    _held_ports[port] = _Held(fd)
    return True


def held_elsewhere(port: int) -> bool:
    """Whether another process holds ``port`` (this one holding it is not "elsewhere")."""
    if port in _held_ports:
        return False
    if hold_port(port):
        release_port(port)
        return False
    return True


def held_here(port: int) -> bool:
    return port in _held_ports


def release_port(port: int) -> None:
    """Let go of one hold of ``port``; the lock goes with the last."""
    held = _held_ports.get(port)
    if held is None:
        return
    held.count -= 1
    if held.count <= 0:
        del _held_ports[port]
        _unlock(_port_lock(port), held.fd)


def hold_ports(ports: dict[str, int], option: Callable[[str], str] | None = None) -> list[int]:
    """Hold each of ``ports`` (label -> port) for this process, all or none: raises TritonServerError naming the first
    that another vllm-repo process holds. Returns the ports, for release_ports."""
    taken: list[int] = []
    for label, port in ports.items():
        if hold_port(port):
            taken.append(port)
            continue
        release_ports(taken)
        choose = f" with {option(label)}" if option else ""
        raise TritonServerError(
            f"{label} port {port} is held by another vllm-repo server on this machine (starting or serving)",
            hint=f"choose another port{choose}, or 0 to let vllm-repo pick a free one",
        )
    return taken


def release_ports(ports: list[int]) -> None:
    for port in ports:
        release_port(port)


# -- Triton's Python backend directory ----------------------------------------------------------------------------


def python_env_dirs() -> set[str]:
    """The Python backend directories of this user's servers now."""
    uid = os.getuid()
    found = set()
    for path in glob.glob(PYTHON_ENV_DIRS):
        with contextlib.suppress(OSError):
            if os.lstat(path).st_uid == uid:
                found.add(path)
    return found


@contextlib.contextmanager
def python_env_lock() -> Iterator[None]:
    """The machine's python_env lock, held while a server starts (see the module's docstring)."""
    path = lock_directory() / "python-env.lock"
    fd = _try_lock(path, blocking=True)
    assert fd is not None  # a blocking lock is taken or raises
    try:
        yield
    finally:
        _unlock(path, fd)


def claim_python_env(before: set[str], settled: Callable[[], bool], wait_s: float = PYTHON_ENV_WAIT_S) -> str | None:
    """The directory that appears beside ``before`` (python_env_dirs() taken under the lock before the server
    started), waiting until one does, ``settled`` (the server exited, or is ready without one), or ``wait_s``. None
    when none appeared, or more than one (whose is whose is not known)."""
    deadline = time.monotonic() + wait_s
    while True:
        new = python_env_dirs() - before
        if new or settled() or time.monotonic() > deadline:
            if not new:
                new = python_env_dirs() - before  # made just before the server exited
            return new.pop() if len(new) == 1 else None
        time.sleep(0.02)


# This process's holds on the python_env directories of its servers: directory -> the lock file's descriptor.
_held_python_envs: dict[str, int] = {}


def _python_env_claim(path: str) -> Path:
    return lock_directory() / f"{os.path.basename(path)}.claim"


def hold_python_env(path: str) -> None:
    """Hold ``path`` for this process's server until release_python_env (taken under the python_env lock, at once
    after the claim: no other process can hold a directory that has just appeared)."""
    if path not in _held_python_envs:
        fd = _try_lock(_python_env_claim(path))
        if fd is not None:
            _held_python_envs[path] = fd


def release_python_env(path: str | None) -> None:
    fd = _held_python_envs.pop(path, None) if path is not None else None
    if path is not None and fd is not None:
        _unlock(_python_env_claim(path), fd)


def unclaimed_python_envs(since: set[str]) -> set[str]:
    """The python_env directories made after ``since`` (python_env_dirs() then) that no live vllm-repo server holds:
    what a stopped server left behind. Taken under the python_env lock, so that no server is between making its
    directory and claiming it."""
    with python_env_lock():
        left = set()
        for path in python_env_dirs() - since:
            fd = None if path in _held_python_envs else _try_lock(_python_env_claim(path))
            if fd is not None:
                _unlock(_python_env_claim(path), fd)
                left.add(path)
        return left


def remove_python_env(path: str | None) -> bool:
    """Remove a server's own python_env directory, once the server is gone (its shutdown removes it; a server
    killed first leaves it). Returns whether there was one to remove."""
    if path is None or not os.path.isdir(path) or os.path.islink(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True
