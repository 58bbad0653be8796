"""Fixtures every test folder may use."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def write_hf_config(path: Path, max_position_embeddings: int = 512) -> Path:
    """A local Hugging Face model directory as far as init and validate look at it: its config.json."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 128,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "intermediate_size": 256,
                "vocab_size": 512,
                "max_position_embeddings": max_position_embeddings,
                "torch_dtype": "float32",
            }
        )
    )
    return path


@pytest.fixture
def hf_model(tmp_path) -> Path:
    return write_hf_config(tmp_path / "models" / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """scripts/make_tiny_model.py's model (random weights, a real byte-level BPE tokenizer, a Hermes chat template),
    built once per session by the serving Python, with a LoRA adapter for it beside it (``tiny_lora``). Tests read it,
    never write into it: a test that needs other files copies it. The same seed gives the same bytes, so a server
    started elsewhere on this directory serves the same model."""
    from tests.serving_env import SERVING_PYTHON, SERVING_SKIP_REASON

    if not SERVING_PYTHON:
        pytest.skip(SERVING_SKIP_REASON)
    out = tmp_path_factory.mktemp("tiny-model") / "tiny-llama"
    subprocess.run(
        [SERVING_PYTHON, str(ROOT / "scripts" / "make_tiny_model.py"), str(out), "--lora", f"{out}-lora"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


@pytest.fixture(scope="session")
def tiny_lora(tiny_model) -> Path:
    """The LoRA adapter (rank 8) of ``tiny_model``, beside it as <model>-lora."""
    return Path(f"{tiny_model}-lora")
