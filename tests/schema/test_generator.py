"""schema_gen: defaults and help text as the schema writes them, and generating from the real vLLM (annotations are
test_annotations.py's)."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serving import NEEDS_VLLM
from vllm_repo.schema import generate as schema_gen
from vllm_repo.schema.generate import clean_help, is_deprecated_text, to_json_value
from vllm_repo.schema.loader import JSON_TYPES, bundled_versions

ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class _Config:
    size: int = 1


class _Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class _Mode(str, enum.Enum):
    FAST = "fast"
    SLOW = "slow"


def test_defaults_become_json_or_a_description() -> None:
    assert to_json_value(_Color.RED) == ("RED", None)
    assert to_json_value(_Mode.SLOW) == ("slow", None)
    assert to_json_value({"b", "a"}) == (["a", "b"], None)
    assert to_json_value((1, 2.5, None)) == ([1, 2.5, None], None)
    assert to_json_value(Path("/models/x")) == ("/models/x", None)
    assert to_json_value(_Config()) == (None, "_Config()")
    value, described = to_json_value(float("inf"))
    assert value is None and described == "inf"
    value, described = to_json_value(_Config)
    assert value is None and described.endswith("_Config")
    json.dumps([to_json_value(v)[0] for v in (_Color.BLUE, {1: "x"}, [_Mode.FAST])])


def test_deprecation_is_read_from_help_without_false_alarms() -> None:
    assert is_deprecated_text("[DEPRECATED] block manager v1 has been removed")
    assert is_deprecated_text("--log-config-file is deprecated and will be removed in v0.33.0.")
    assert is_deprecated_text("This argument has been deprecated. Use `runner` instead.")
    assert not is_deprecated_text("Whether to allow deprecated quantization methods.")
    assert not is_deprecated_text("Enable deprecated Prometheus metrics that have been hidden.")
    assert not is_deprecated_text(None)


def test_help_drops_command_line_only_advice() -> None:
    assert clean_help(argparse.SUPPRESS) is None
    assert clean_help("   ") is None
    assert clean_help("Use 50%% of memory.") == "Use 50% of memory."
    text = (
        "Speculative decoding configuration.\n\nShould either be a valid JSON string or JSON keys passed individually."
    )
    assert clean_help(text) == "Speculative decoding configuration."
    # Older releases follow the sentence with examples of the dotted command-line syntax.
    older = (
        "Extra config.\n\nShould either be a valid JSON string or JSON keys passed individually. For example, "
        "the following sets of arguments are equivalent:\n\n- `--json-arg '{\"key1\": 1}'`\n- `--json-arg.key1 1`\n"
    )
    assert clean_help(older) == "Extra config."


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is importable in this environment")
def test_generate_without_vllm_fails_cleanly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "schema", "generate", "--output", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "cannot import vLLM" in result.stderr and "--python" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "x.json").exists()


@NEEDS_VLLM
def test_generate_from_the_installed_vllm(serving_python: str, tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    cmd = [sys.executable, "-m", "vllm_repo", "schema", "generate", "--python", serving_python, "--output", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["format"] == schema_gen.FORMAT and document["source"] == "import"
    fields = document["fields"]
    assert len(fields) > 150
    for name, spec in fields.items():
        assert set(spec) >= {"types", "default", "choices", "help", "deprecated", "flag"}, name
        assert spec["types"] and set(spec["types"]) <= set(JSON_TYPES), name
        if spec["choices"] is not None:
            assert None not in spec["choices"], name
        if spec["flag"] is not None:
            assert spec["flag"].startswith("-"), name
    # Facts every release of the last two years has: a Literal dtype, an Optional int, a bool flag with help.
    assert "bfloat16" in fields["dtype"]["choices"]
    assert fields["max_model_len"]["types"] == ["integer", "null"]
    assert fields["enforce_eager"]["types"] == ["boolean"] and fields["enforce_eager"]["help"]
    assert fields["gpu_memory_utilization"]["types"] == ["number"]
    assert 0 < fields["gpu_memory_utilization"]["default"] <= 1
    # No --output refuses to overwrite: the second run without --force fails and leaves the file alone.
    before = out.read_bytes()
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert again.returncode == 1 and "--force" in again.stderr and out.read_bytes() == before

    # The bundled schema of this release is what the real release gives today.
    version = document["vllm_version"]
    if version in bundled_versions():
        bundled = json.loads((ROOT / "schemas" / "engine_args" / f"vllm-{version}.json").read_text())["fields"]
        assert set(bundled) == set(fields)
        for name in fields:
            assert bundled[name]["types"] == fields[name]["types"], name
            assert bundled[name]["default"] == fields[name]["default"], name
            assert bundled[name]["choices"] == fields[name]["choices"], name
