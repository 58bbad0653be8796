"""Shared by the estimate tests: real model configs and real (sparse) safetensors files."""

from __future__ import annotations

import json
import struct
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "estimate" / "data"
REPO = Path(__file__).resolve().parents[2]
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "F8_E4M3": 1, "I8": 1}


def config(name: str) -> dict:
    return json.loads((DATA / "configs" / f"{name}.json").read_text())


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A valid safetensors file: 8-byte little-endian header length, JSON header, then the (zero) data.
    The data part is a sparse hole, so large shapes cost no disk. Returns the data size in bytes."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = DTYPE_BYTES[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)
    return offset


def llama_tensors(cfg: dict, dtype: str = "BF16") -> dict[str, tuple[str, list[int]]]:
    """The tensors a Hugging Face Llama/Qwen2 checkpoint of this config holds, with their real names."""
    h, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or h // heads
    bias = cfg.get("model_type") == "qwen2"
    t: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": (dtype, [vocab, h])}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "self_attn.q_proj.weight"] = (dtype, [heads * hd, h])
        t[p + "self_attn.k_proj.weight"] = (dtype, [kv * hd, h])
        t[p + "self_attn.v_proj.weight"] = (dtype, [kv * hd, h])
        t[p + "self_attn.o_proj.weight"] = (dtype, [h, heads * hd])
        if bias:
            t[p + "self_attn.q_proj.bias"] = (dtype, [heads * hd])
            t[p + "self_attn.k_proj.bias"] = (dtype, [kv * hd])
            t[p + "self_attn.v_proj.bias"] = (dtype, [kv * hd])
        t[p + "mlp.gate_proj.weight"] = (dtype, [inter, h])
        t[p + "mlp.up_proj.weight"] = (dtype, [inter, h])
        t[p + "mlp.down_proj.weight"] = (dtype, [h, inter])
        t[p + "input_layernorm.weight"] = (dtype, [h])
        t[p + "post_attention_layernorm.weight"] = (dtype, [h])
    t["model.norm.weight"] = (dtype, [h])
    if not cfg.get("tie_word_embeddings"):
        t["lm_head.weight"] = (dtype, [vocab, h])
    return t


def model_dir(tmp_path: Path, cfg: dict, *, weights: bool = True, dtype: str = "BF16", name: str = "model") -> Path:
    d = tmp_path / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    if weights:
        write_safetensors(d / "model.safetensors", llama_tensors(cfg, dtype))
    return d
