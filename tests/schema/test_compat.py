"""The wheel route's library shims: a missing optional module is stubbed for vLLM's own imports only."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("gguf") is not None or importlib.util.find_spec("vllm") is not None,
    reason="needs an environment without gguf and vllm (the dev environment)",
)
def test_stub_serves_vllm_imports_but_not_library_probes(tmp_path: Path) -> None:
    package = tmp_path / "vllm"
    package.mkdir()
    # A stand-in for a release that imports gguf at module level and uses it in a class body.
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        import gguf
        from gguf.constants import GGMLQuantizationType as WeightType
        UNQUANTIZED = {WeightType.F32, WeightType.F16}
        class Reader(gguf.GGUFReader):
            pass
    """)
    )
    (tmp_path / "probe.py").write_text("import importlib.util\nFOUND = importlib.util.find_spec('gguf')\n")
    code = textwrap.dedent("""
        import sys
        from vllm_repo.schema.compat import apply_library_compat
        applied = apply_library_compat()
        import probe
        import vllm
        print(applied)
        print(probe.FOUND is None, len(vllm.UNQUANTIZED) >= 1, issubclass(vllm.Reader, object))
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    applied, checks = result.stdout.splitlines()
    assert "stub module gguf" in applied
    assert checks == "True True True"


def test_without_the_switch_nothing_is_patched() -> None:
    code = (
        "import sys, os\nos.environ.pop('VLLM_REPO_SCHEMA_COMPAT', None)\n"
        "before = list(sys.meta_path)\n"
        "from vllm_repo.schema import generate as schema_gen\n"
        "print(sys.meta_path == before)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip() == "True", result.stderr
