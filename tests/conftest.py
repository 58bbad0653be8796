"""Fixtures every test folder may use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


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
