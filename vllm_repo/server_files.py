"""Where launch finds a Triton server: --tritonserver, ``tritonserver`` on PATH (an NGC container), or the embedded one.

The embedded server is the real Triton 2.51 carried by the ``nvidia-pytriton`` 0.7.0 wheel on PyPI. It is fetched once
with ``pip download --no-deps`` (installing the wheel would pull its numpy<2 pin into the user's environment) and
unpacked into the cache directory, so no Docker and no root are needed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from vllm_repo.triton_server import TRITON_HOME_ENV, TritonHome, TritonServerError

PYTRITON_VERSION = "0.7.0"
EMBEDDED_TRITON_VERSION = "2.51.0"  # the server inside nvidia-pytriton 0.7.0 (the 24.10 release)

Progress = Callable[[str], None]


def cache_dir() -> Path:
    """$VLLM_REPO_CACHE, else $XDG_CACHE_HOME/vllm-repo, else ~/.cache/vllm-repo."""
    if os.environ.get("VLLM_REPO_CACHE"):
        return Path(os.environ["VLLM_REPO_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-repo"


@dataclasses.dataclass(frozen=True)
class SystemTriton(TritonHome):
    """A Triton installed the usual way (``/opt/tritonserver`` in NGC containers): bin/, lib/, backends/python/ with
    one stub built for the image's Python."""

    @property
    def server_root(self) -> Path:
        return self.root

    @property
    def libs(self) -> Path:
        return self.root / "lib"

    def stub(self, python_version: str) -> Path:
        return self.python_backend / "triton_python_backend_stub"

    def stub_versions(self) -> list[str]:
        return ["the image's Python"] if self.stub("").is_file() else []


@dataclasses.dataclass(frozen=True)
class ServerChoice:
    home: TritonHome
    origin: str  # "--tritonserver", "PATH", "$VLLM_REPO_TRITON_HOME", "cached", "downloaded"

    @property
    def embedded(self) -> bool:
        return not isinstance(self.home, SystemTriton)

    def describe(self) -> str:
        what = f"embedded Triton {EMBEDDED_TRITON_VERSION}" if self.embedded else "Triton"
        return f"{what} at {self.home.tritonserver} [{self.origin}]"


def _system_triton(binary: Path) -> TritonHome:
    """The install a tritonserver binary belongs to: an unpacked pytriton wheel (embedded) or a system install. Its
    directory as found first (bin/../backends), else where a symlink (e.g. /usr/local/bin) points."""
    for candidate in (Path(os.path.abspath(binary)), binary.resolve()):
        root = candidate.parent.parent
        # An unpacked pytriton wheel has its server at <root>/pytriton/tritonserver/bin/tritonserver.
        if root.name == "tritonserver" and root.parent.name == "pytriton":
            return TritonHome(root.parent.parent)
        if (root / "backends").is_dir():
            return SystemTriton(root)
    return SystemTriton(binary.resolve().parent.parent)


def find_server(tritonserver: str | os.PathLike | None = None, *, download: bool = True,
                progress: Progress | None = None) -> ServerChoice:
    """The server launch uses, in this order: ``tritonserver`` (a path), ``tritonserver`` on PATH,
    $VLLM_REPO_TRITON_HOME (an unpacked wheel), the cached embedded server, a fresh download of it."""
    if tritonserver is not None:
        path = Path(tritonserver).expanduser()
        if path.is_dir():
            path = path / "bin" / "tritonserver"
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise TritonServerError(f"--tritonserver {tritonserver}: no executable tritonserver there")
        return ServerChoice(_system_triton(path), "--tritonserver")
    on_path = shutil.which("tritonserver")
    if on_path:
        return ServerChoice(_system_triton(Path(on_path)), "PATH")
    if os.environ.get(TRITON_HOME_ENV):
        home = TritonHome(Path(os.environ[TRITON_HOME_ENV]))
        home.check()
        return ServerChoice(home, f"${TRITON_HOME_ENV}")
    home = TritonHome(embedded_home())
    if home.tritonserver.is_file():
        return ServerChoice(home, "cached")
    if not download:
        raise TritonServerError(
            "no Triton server found: no --tritonserver, none on PATH, and the embedded one is not downloaded yet",
            )
    fetch_embedded_server(progress=progress)
    return ServerChoice(TritonHome(embedded_home()), "downloaded")


def embedded_home() -> Path:
    # The same place .ci/setup-serving.sh unpacks to, so either fills the cache for the other.
    return cache_dir() / f"pytriton-{PYTRITON_VERSION}"


def fetch_embedded_server(progress: Progress | None = None, python: str | None = None) -> Path:
    """Download the nvidia-pytriton wheel (no dependencies) and unpack it into the cache, atomically: it is unpacked
    beside its final place and renamed there, so a killed download never leaves a half-unpacked server."""
    say = progress or (lambda message: None)
    dest = embedded_home()
    if TritonHome(dest).tritonserver.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".pytriton-download-", dir=dest.parent))
    try:
        say(f"downloading the Triton server files (nvidia-pytriton=={PYTRITON_VERSION} from PyPI, about 100 MB) ...")
        cmd = [python or sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               f"nvidia-pytriton=={PYTRITON_VERSION}", "-d", str(work / "wheel")]
        # pip draws its own progress bar on a terminal; its output goes to our stderr.
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
        if done.returncode != 0:
            raise TritonServerError(
                f"`{' '.join(cmd[2:])}` failed (exit {done.returncode}); check the network or PyPI access, or pass "
                "--tritonserver PATH to use an installed server")
        wheels = list((work / "wheel").glob("nvidia_pytriton-*.whl"))
        if not wheels:
            raise TritonServerError("pip download finished but left no nvidia_pytriton wheel")
        unpacked = work / "unpacked"
        _unpack(wheels[0], unpacked, say)
        for path in [TritonHome(unpacked).tritonserver, *TritonHome(unpacked).server_root.glob(
                "python_backend_stubs/*/triton_python_backend_stub")]:
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        TritonHome(unpacked).check()
        try:
            os.rename(unpacked, dest)
        except OSError:
            # Someone else finished first (another launch, or setup-serving.sh): theirs is as good as ours.
            if not TritonHome(dest).tritonserver.is_file():
                raise
        say(f"Triton server files ready in {dest}")
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _unpack(wheel: Path, dest: Path, say: Progress) -> None:
    with zipfile.ZipFile(wheel) as archive:
        members = archive.infolist()
        total = sum(m.file_size for m in members) or 1
        done = 0
        next_report = 0.25
        for member in members:
            archive.extract(member, dest)
            done += member.file_size
            if done / total >= next_report:
                say(f"unpacking {wheel.name}: {done * 100 // total}%")
                next_report += 0.25
