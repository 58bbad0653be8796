"""The bundled schema files: which releases, their format, and that the loader reads every one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_repo.schema.loader import JSON_TYPES, bundled_versions, choose_schema_version, json_type, load_schema

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas" / "engine_args"


def test_the_bundled_releases_span_old_to_current() -> None:
    versions = [Version(v) for v in bundled_versions()]
    assert len(versions) >= 10
    assert versions == sorted(versions)
    assert versions[0] <= Version("0.9.0")
    assert versions[-1] >= Version("0.32.0")
    assert "0.26.0" in bundled_versions() and "0.32.0" in bundled_versions()


@pytest.mark.parametrize("version", bundled_versions())
def test_each_file_has_the_format_and_loads(version: str) -> None:
    raw = json.loads((SCHEMAS / f"vllm-{version}.json").read_text())
    assert raw["format"] == 1 and raw["vllm_version"] == version
    assert raw["source"] in ("import", "wheel") and raw["source_detail"]
    assert len(raw["fields"]) >= 50
    for name, spec in raw["fields"].items():
        assert spec["types"] and set(spec["types"]) <= set(JSON_TYPES), name
        assert spec["choices"] is None or (spec["choices"] and None not in spec["choices"]), name
        assert isinstance(spec["deprecated"], bool), name
        if spec["default"] is not None:
            kind = json_type(spec["default"])
            assert kind in spec["types"] or (kind == "integer" and "number" in spec["types"]), name
        elif "default_repr" not in spec:
            assert "null" in spec["types"], name
    schema = load_schema(version)
    assert set(schema.fields) == set(raw["fields"])
    assert schema.get("model") is not None and schema.get("dtype") is not None


def test_every_ngc_vllm_container_since_24_10_has_its_own_schema() -> None:
    ngc = pytest.importorskip("vllm_repo.releases.ngc")
    for release in ngc.RELEASES:
        if Version(release.release) < Version("24.10"):
            continue
        base = Version(release.vllm).base_version
        choice = choose_schema_version(release.vllm)
        assert choice.schema_version == base, (release.release, release.vllm, choice)
