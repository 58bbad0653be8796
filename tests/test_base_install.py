"""What the base install (pip install vllm-repo, the pre-commit hook's environment) can do without the ``full``
extra: validate works and imports none of it; the commands that need it say which extra to install. The extra's
packages are made unimportable in a child process, as in an environment that lacks them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]

# The packages of the full extra, and the heavy ones they pull in.
ABSENT = ("tritonclient", "grpc", "aiohttp", "huggingface_hub", "hf_xet", "numpy", "gevent", "geventhttpclient")

_RUN = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    ABSENT = set(sys.argv[1].split(","))

    class Absent(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
    import importlib.util
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] in ABSENT else _find_spec(name, *a)
    sys.argv = ["vllm-repo", *sys.argv[2:]]
    from vllm_repo.cli import main
    try:
        main()
    finally:
        loaded = sorted({m.split(".")[0] for m in sys.modules} & ABSENT)
        print("LOADED:" + ",".join(loaded), file=sys.stderr)
    """
)


def run_without_extras(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", _RUN, ",".join(ABSENT), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_validate_works_without_the_full_extra_and_reads_config_pbtxt_with_tritons_schema(tmp_path):
    model = tmp_path / "repo" / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { kind: KIND_GPU count: 1 } ]\n')
    (model / "1" / "model.json").write_text(json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct"}))
    done = run_without_extras("validate", str(tmp_path / "repo"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LOADED:\n" in done.stderr  # none of the extra's packages was even imported
    # A field Triton's ModelConfig does not have is an error naming the line: the schema is read without tritonclient.
    (model / "config.pbtxt").write_text('backend: "vllm"\ninstance_groups [ { kind: KIND_GPU } ]\n')
    done = run_without_extras("validate", str(tmp_path / "repo"))
    assert done.returncode == 1 and "instance_groups" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_gateway_and_the_hub_name_the_extra_they_need(tmp_path):
    done = run_without_extras("openai", "--triton-url", "127.0.0.1:8001", "--port", "0")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "the OpenAI gateway needs tritonclient, grpc, aiohttp" in done.stderr
    assert "pip install 'vllm-repo[full]'" in done.stderr
    done = run_without_extras("estimate", "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", "H100 80GB")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "needs huggingface_hub" in done.stderr and "vllm-repo[full]" in done.stderr


def test_the_base_dependencies_leave_out_the_full_extras_packages():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"]).lower()
    assert not [name for name in ("tritonclient", "aiohttp", "huggingface_hub", "numpy", "grpc") if name in base]
    assert {"tritonclient", "aiohttp", "huggingface_hub"} <= {
        d.split("[")[0].split(">")[0] for d in project["optional-dependencies"]["full"]
    }
