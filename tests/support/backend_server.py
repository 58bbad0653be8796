"""What a Triton server with the bundled backend serves in the backend's end-to-end tests: the tiny model's engine
arguments, config.pbtxt and environment."""

from __future__ import annotations

from bench.lib.tiny import SERVER_ENV, tiny_engine_args  # noqa: F401
from tests.support.serving import SERVING_PYTHON, SERVING_SKIP_REASON, TRITON_HOME, needs_serving  # noqa: F401

MODEL_NAME = "tiny"


DEFAULT_MAX_TOKENS = 24


# The tiny model's engine arguments and the CPU server's environment: the benchmarks serve it the same way.
engine_args = tiny_engine_args


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
