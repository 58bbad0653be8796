"""What a Triton server with the bundled backend serves in the backend's end-to-end tests: the tiny model's engine
arguments, config.pbtxt and environment."""

from __future__ import annotations

from pathlib import Path

from tests.support.serving import SERVING_PYTHON, SERVING_SKIP_REASON, TRITON_HOME, needs_serving  # noqa: F401

MODEL_NAME = "tiny"


DEFAULT_MAX_TOKENS = 24


# vLLM on a 2-core CPU: a bounded KV cache (else it takes a share of all RAM), no thread pinning (the default pins to
# core 0 and runs ~20x slower), no extra worker process.
SERVER_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def engine_args(model_dir: Path) -> dict:
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


CONFIG_PBTXT = f"""\
backend: "vllm"
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
parameters {{ key: "REPORT_CUSTOM_METRICS" value: {{ string_value: "true" }} }}
parameters {{ key: "ENABLE_VLLM_HEALTH_CHECK" value: {{ string_value: "true" }} }}
parameters {{ key: "DEFAULT_MAX_TOKENS" value: {{ string_value: "{DEFAULT_MAX_TOKENS}" }} }}
"""


# Metrics asked for in config.pbtxt, but vLLM's stats turned off in model.json; and metrics not asked for at all.
METRICS_OFF_MODELS = {
    "stats_off": (
        'parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n',
        {"disable_log_stats": True},
    ),
    "report_absent": ("", {}),
}
