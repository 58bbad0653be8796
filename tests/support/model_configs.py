"""Models' config.json files: as their publishers wrote them (tests/estimate/data/configs), for tests that need a
real architecture without weights, and a small one written into a model directory."""

import json
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "estimate" / "data" / "configs"


def published_config(name: str) -> dict:
    """A model's config.json as its publisher wrote it (tests/estimate/data/configs), without weights."""
    return json.loads((CONFIGS / f"{name}.json").read_text())


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
