"""What a Triton server with the bundled backend serves in the backend's end-to-end tests: the tiny model's engine
arguments, config.pbtxt and environment."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from bench.lib.tiny import SERVER_ENV, tiny_engine_args
from tests.support.serving import SERVING_PYTHON, SERVING_SKIP_REASON, TRITON_HOME, needs_serving  # noqa: F401
from vllm_repo.serve.server import TritonServer

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


def bundled_server(repo: Path, logs: Path, extra_args: Sequence[str] = ()) -> Callable[[int], TritonServer]:
    """For tests.support.stacks.ready_server: the server of ``repo`` with the bundled backend, its log
    ``logs``/tritonserver.log (a second attempt's tritonserver-2.log)."""

    def make(attempt: int) -> TritonServer:
        return TritonServer(
            repo,
            serving_python=SERVING_PYTHON,
            triton_home=TRITON_HOME,
            env=SERVER_ENV,
            extra_args=extra_args,
            log_path=logs / ("tritonserver.log" if attempt == 1 else f"tritonserver-{attempt}.log"),
        )

    return make
