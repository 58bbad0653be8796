"""The wheel route against real imports: the recorded comparison, and a live run when vLLM is at hand."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from packaging.version import Version

from tests.support.serving import NEEDS_VLLM
from vllm_repo.schema import wheel as schema_wheel

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "engine_args"
RECORD = SCHEMAS / "crosscheck.json"


def _digest(document: dict) -> str:
    core = {name: [spec["types"], spec["default"]] for name, spec in document["fields"].items()}
    return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()


def _record() -> dict:
    return json.loads(RECORD.read_text())["releases"]


def test_at_least_three_releases_agree_on_names_types_and_defaults() -> None:
    releases = _record()
    assert len(releases) >= 3
    for version, entry in releases.items():
        assert entry["faithful"], version
        assert entry["only_in_import"] == [] and entry["only_in_wheel"] == [], version
        assert entry["differences"]["types"] == 0 and entry["differences"]["default"] == 0, version
        assert entry["fields_import"] == entry["fields_wheel"] > 150, version
        assert entry["import_source"].startswith("installed vllm"), version
        assert ".whl" in entry["wheel_source"], version
        assert entry["import_digest"] == entry["wheel_digest"], version


def test_the_bundled_files_are_the_ones_cross_checked() -> None:
    for version, entry in _record().items():
        bundled = json.loads((SCHEMAS / f"vllm-{version}.json").read_text())
        assert _digest(bundled) == entry[f"{bundled['source']}_digest"], version


@NEEDS_VLLM
def test_the_wheel_route_reproduces_a_real_import(serving_python: str) -> None:
    installed = schema_wheel.generate_installed(serving_python)
    version = installed["vllm_version"]
    cache = Path(os.environ.get("VLLM_REPO_WHEEL_CACHE", schema_wheel.DEFAULT_CACHE))
    if not schema_wheel.is_cached(version, cache) and not os.environ.get("VLLM_REPO_FETCH_WHEELS"):
        pytest.skip(
            f"the vllm {version} wheel is not cached in {cache} (about 300 MB; "
            "set VLLM_REPO_FETCH_WHEELS=1 to download it)"
        )
    from_wheel = schema_wheel.generate_from_wheel(version, serving_python, cache)
    assert from_wheel["source"] == "wheel" and installed["source"] == "import"
    assert set(from_wheel["fields"]) == set(installed["fields"])
    for name, spec in installed["fields"].items():
        assert from_wheel["fields"][name]["types"] == spec["types"], name
        assert from_wheel["fields"][name]["default"] == spec["default"], name


@NEEDS_VLLM
def test_generate_from_wheel_on_the_command_line(serving_python: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    cache = Path(os.environ.get("VLLM_REPO_WHEEL_CACHE", schema_wheel.DEFAULT_CACHE))
    recorded = sorted(json.loads(RECORD.read_text())["releases"])
    cached = [v for v in recorded if schema_wheel.is_cached(v, cache)]
    if not cached and not os.environ.get("VLLM_REPO_FETCH_WHEELS"):
        pytest.skip(f"no cross-checked release is cached in {cache} (set VLLM_REPO_FETCH_WHEELS=1 to download one)")
    # Without a cached one, the newest: the serving environment's release, which the live test above fetches too.
    version = (cached or [max(recorded, key=Version)])[0]
    out = tmp_path / "from-wheel.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_repo",
            "schema",
            "generate",
            "--from-wheel",
            version,
            "--python",
            serving_python,
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["vllm_version"] == version and document["source"] == "wheel"
    assert _digest(document) == json.loads(RECORD.read_text())["releases"][version]["wheel_digest"]
    missing_python = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "schema", "generate", "--from-wheel", version],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert missing_python.returncode == 2 and "--python" in missing_python.stderr
