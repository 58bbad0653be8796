"""The Triton server's files: where launch finds a server (--tritonserver, ``tritonserver`` on PATH in an NGC
container, or the embedded one), and the backend directory laid out from them for a run.

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
from collections.abc import Callable
from pathlib import Path

from vllm_repo.serve.errors import TritonServerError

TRITON_HOME_ENV = "VLLM_REPO_TRITON_HOME"

PYTRITON_VERSION = "0.7.0"
EMBEDDED_TRITON_VERSION = "2.51.0"  # the server inside nvidia-pytriton 0.7.0 (the 24.10 release)

Progress = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class TritonHome:
    """An unpacked nvidia-pytriton wheel: the directory holding ``pytriton/`` and ``nvidia_pytriton.libs/``."""

    root: Path

    @property
    def server_root(self) -> Path:
        return self.root / "pytriton" / "tritonserver"

    @property
    def tritonserver(self) -> Path:
        return self.server_root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.server_root / "backends" / "python"

    @property
    def libs(self) -> Path:
        return self.root / "nvidia_pytriton.libs"

    def stub(self, python_version: str) -> Path:
        return self.server_root / "python_backend_stubs" / python_version / "triton_python_backend_stub"

    def stub_versions(self) -> list[str]:
        stubs = self.server_root / "python_backend_stubs"
        return sorted(p.name for p in stubs.iterdir()) if stubs.is_dir() else []

    def check(self) -> None:
        if not self.tritonserver.is_file():
            raise TritonServerError(
                f"no tritonserver under {self.root} (expected {self.tritonserver}); point {TRITON_HOME_ENV} at an "
                "unpacked nvidia-pytriton 0.7.0 wheel, e.g. by running `bash .ci/setup-serving.sh`"
            )
        for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
            if not (self.python_backend / name).is_file():
                raise TritonServerError(f"the Python backend file {self.python_backend / name} is missing")


def layout_backend_directory(
    dest: str | os.PathLike,
    triton_home: TritonHome,
    python_version: str,
    *,
    backend_name: str = "vllm",
    backend_source: str | os.PathLike | None = None,
) -> Path:
    """Lay out a Triton backend directory ``dest``:

    - ``dest/python/``: libtriton_python.so, triton_python_backend_utils.py and the stub built for ``python_version``
      (named ``triton_python_backend_stub``, which is where the Python backend looks for it);
    - ``dest/<backend_name>/``: the bundled backend, model.py and its package ``vllm_repo_backend/`` (or
      ``backend_source`` alone, as model.py).

    Returns ``dest``. Files are copied, not linked, so the directory outlives a cache cleanup.
    """
    from vllm_repo.backend import copy_backend

    triton_home.check()
    stub = triton_home.stub(python_version)
    if not stub.is_file():
        raise TritonServerError(
            f"Triton has no Python backend stub for Python {python_version} (it has: "
            f"{', '.join(triton_home.stub_versions()) or 'none'}); use a serving Python of one of those versions"
        )
    dest = Path(dest)
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        shutil.copy2(triton_home.python_backend / name, python_dir / name)
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    os.chmod(python_dir / "triton_python_backend_stub", 0o755)
    model_dir = dest / backend_name
    model_dir.mkdir(parents=True, exist_ok=True)
    if backend_source:
        shutil.copy2(Path(backend_source), model_dir / "model.py")
    else:
        copy_backend(model_dir)
    return dest


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


def find_server(
    tritonserver: str | os.PathLike | None = None, *, download: bool = True, progress: Progress | None = None
) -> ServerChoice:
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
        cmd = [
            python or sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            f"nvidia-pytriton=={PYTRITON_VERSION}",
            "-d",
            str(work / "wheel"),
        ]
        # pip draws its own progress bar on a terminal; its output goes to our stderr.
        done = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
        if done.returncode != 0:
            raise TritonServerError(
                f"`{' '.join(cmd[2:])}` failed (exit {done.returncode}); check the network or PyPI access, or pass "
                "--tritonserver PATH to use an installed server"
            )
        wheels = list((work / "wheel").glob("nvidia_pytriton-*.whl"))
        if not wheels:
            raise TritonServerError("pip download finished but left no nvidia_pytriton wheel")
        unpacked = work / "unpacked"
        _unpack(wheels[0], unpacked, say)
        for path in [
            TritonHome(unpacked).tritonserver,
            *TritonHome(unpacked).server_root.glob("python_backend_stubs/*/triton_python_backend_stub"),
        ]:
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
