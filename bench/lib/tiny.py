"""The tiny random-weight model (scripts/make_tiny_model.py) the benchmarks and the end-to-end tests serve on a CPU,
the engine arguments it is served with and the environment vLLM runs in there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKE_TINY_MODEL = ROOT / "scripts" / "make_tiny_model.py"

# No network: the model is local and vLLM reports nothing home.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
# vLLM on a CPU: no thread pinning (the default pins to core 0 and runs ~20x slower), no extra worker process. Set
# before vLLM loads.
CPU_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
# What a server on a 2-core CPU runs with: both of the above.
SERVER_ENV = {**CPU_ENV, **OFFLINE_ENV, "DO_NOT_TRACK": "1"}


def build_tiny_model(
    out: Path, python: str | os.PathLike[str] = sys.executable, timeout: float = 300, lora: Path | None = None
) -> Path:
    """scripts/make_tiny_model.py's model in ``out`` (and a LoRA adapter for it in ``lora``), built by ``python``
    (torch, transformers): the same seed gives the same bytes, so two builds serve the same model."""
    command = [str(python), str(MAKE_TINY_MODEL), str(out), *(["--lora", str(lora)] if lora else [])]
    subprocess.run(command, check=True, capture_output=True, timeout=timeout)
    return out


def serving_python() -> str:
    """The Python with vLLM the CPU benchmarks serve with (VLLM_REPO_SERVING_PYTHON), or a stop that says how to get
    it."""
    python = os.environ.get("VLLM_REPO_SERVING_PYTHON")
    if not python:
        raise SystemExit("set VLLM_REPO_SERVING_PYTHON (eval \"$(bash .ci/setup-serving.sh | sed 's/^/export /')\")")
    return python


def tiny_engine_args(model_dir: Path | str) -> dict[str, object]:
    """The engine arguments the end-to-end tests serve the tiny model with: a bounded KV cache (else it takes a share
    of all RAM), LoRA on."""
    return {
        "model": str(model_dir),
        "dtype": "float32",
        "max_model_len": 512,
        "kv_cache_memory_bytes": 64 * 2**20,
        "max_num_seqs": 64,
        # Skips torch.compile at start: the tests measure behaviour, not speed.
        "enforce_eager": True,
        "enable_lora": True,
        "max_lora_rank": 8,
        "max_loras": 1,
    }
