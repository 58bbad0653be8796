"""Hugging Face helpers: what a repo id looks like, and a model's config.json found without the network (a local
model directory, or the local HF cache), with the values vLLM derives from it.

validate must not wait on the network, so nothing here downloads; the estimator has its own online path.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TypeGuard

# Keys vLLM reads the maximum context length from (the smallest one present wins), as in its
# _get_and_verify_max_len.
MAX_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


# The Hub's own rule for repo ids: letters, digits, '-', '_' and '.', no '--' or '..', at most 96 characters, with
# an owner ("Qwen/Qwen2.5-0.5B") or, for the oldest models, without one ("gpt2").
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_repo_id(text: str, *, owner_required: bool = True) -> bool:
    """Whether ``text`` is written as a Hugging Face repo id. Whether it also names an existing local path is
    the caller's question: "org/model" can be both."""
    if not isinstance(text, str) or len(text) > 96 or "--" in text or ".." in text or not _REPO_ID.match(text):
        return False
    return "/" in text or not owner_required


def find_local_config(model: str, revision: str | None = None, base: Path | None = None) -> tuple[Path, dict] | None:
    """(path, config) of the model's config.json when it is reachable offline, else None."""
    candidate = Path(model).expanduser()
    if not candidate.is_absolute() and base is not None and not candidate.exists():
        candidate = base / candidate
    if candidate.is_dir():
        return _read(candidate / "config.json")
    if candidate.exists() or not is_repo_id(model):
        return None  # a file (GGUF), or a path that only exists elsewhere (inside a container)
    if not (hub_cache_dir() / f"models--{model.replace('/', '--')}").is_dir():
        return None  # not downloaded here; deciding that without importing huggingface_hub saves ~0.1 s
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        cached = try_to_load_from_cache(model, "config.json", revision=revision)
    except Exception:  # an invalid repo id or revision is the engine-args rules' business, not a crash here
        return None
    return _read(Path(cached)) if isinstance(cached, str) else None


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, resolved from the environment the way huggingface_hub's constants do."""
    home = os.path.expandvars(
        os.path.expanduser(
            os.getenv(
                "HF_HOME",
                os.path.join(
                    os.getenv("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache")), "huggingface"
                ),
            )
        )
    )
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(os.path.expandvars(os.path.expanduser(os.getenv("HF_HUB_CACHE", legacy))))


def _read(path: Path) -> tuple[Path, dict] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (path, data) if isinstance(data, dict) else None


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's settings under text_config / llm_config."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = config.get(key)
        if isinstance(inner, dict) and ("num_attention_heads" in inner or "hidden_size" in inner):
            return inner
    return config


def derived_max_model_len(config: dict[str, Any]) -> int | None:
    """The longest context the model supports as vLLM derives it (including linear/dynamic RoPE scaling)."""
    cfg = text_config(config)
    values = [cfg[k] for k in MAX_LENGTH_KEYS if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool)]
    if not values:
        return None
    length = min(values)
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type"))
        factor = scaling.get("factor")
        # These types already account for the extension in max_position_embeddings (vLLM does the same).
        if kind not in ("su", "longrope", "llama3", "default", None) and _is_number(factor):
            base = scaling.get("original_max_position_embeddings", length) if kind == "yarn" else length
            try:
                if _is_number(base) and base > 0 and factor > 0:  # NaN compares false: skipped too
                    length = int(base * factor)
            except (OverflowError, ValueError):  # inf in a hand-edited config: keep the unscaled length
                pass
    return length


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def attention_heads(config: dict[str, Any]) -> int | None:
    cfg = text_config(config)
    for key in ("num_attention_heads", "n_head", "num_heads", "n_heads"):
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def kv_heads(config: dict[str, Any]) -> int | None:
    cfg = text_config(config)
    for key in ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num"):
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return attention_heads(config)
