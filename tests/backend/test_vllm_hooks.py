"""What the backend leaves out of vLLM's serving stack, checked against the vLLM of the serving environment: the
middleware of vLLM's real app that has nothing to act on behind the gateway, and vLLM's own Prometheus stat logger,
whose registry nothing exports from Triton's stub. A vLLM release that renames either would silently bring the
per-token cost back; these tests notice."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.serving import SERVING_PYTHON, needs_serving

pytestmark = [pytest.mark.e2e, needs_serving]

DROPPED = {"CORSMiddleware", "PrometheusInstrumentatorMiddleware"}
MODEL_PY = Path(__file__).resolve().parents[2] / "vllm_repo" / "backend" / "model.py"

# Runs in the serving Python: model.py imported by path, its package found beside it.
PROBE = """\
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("backend_model", sys.argv[1])
model = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
from vllm_repo_backend import contract, environment, metrics, openai_app  # beside model.py, which put them on sys.path
out = {}

build_app, _ = openai_app.import_app_builders()
make_arg_parser = environment.import_first(contract.SERVE_PARSER_MODULES, "make_arg_parser")
parser_cls = environment.import_first(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
args = make_arg_parser(parser_cls()).parse_args(["--middleware", "starlette.middleware.gzip.GZipMiddleware"])
app = build_app(args, supported_tasks=("generate",))
out["vllm_middleware"] = [m.cls.__name__ for m in app.user_middleware]
out["backend_middleware"] = [m.cls.__name__ for m in openai_app.backend_middleware(app.user_middleware)]

from prometheus_client import REGISTRY
from vllm.engine.arg_utils import EngineArgs
from vllm.v1.metrics.loggers import PrometheusStatLogger, StatLoggerManager
from vllm.v1.metrics.stats import SchedulerStats

def vllm_metrics():
    return sorted(name for name in REGISTRY._names_to_collectors if name.startswith("vllm:"))

config = EngineArgs(model=sys.argv[2], dtype="float32", max_model_len=256, enforce_eager=True).create_engine_config()
accumulator = metrics.MetricsAccumulator()
triton_logger = metrics.make_stat_logger_class(accumulator)
manager = StatLoggerManager(config, custom_stat_loggers=[triton_logger, metrics.make_unexported_prometheus_class()])
manager.record(SchedulerStats(num_running_reqs=3, num_waiting_reqs=2), None)
manager.log()
out["loggers"] = [type(logger).__name__ for logger in manager.stat_loggers]
out["real_prometheus_loggers"] = sum(type(logger) is PrometheusStatLogger for logger in manager.stat_loggers)
out["registered"] = vllm_metrics()
out["accumulated"] = [accumulator.running, accumulator.waiting]

# The same manager without the stand-in: vLLM registers its families, so the check above can fail.
StatLoggerManager(config, custom_stat_loggers=[triton_logger])
out["registered_without"] = vllm_metrics()
print("PROBE " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(tiny_model_dir) -> dict:
    done = subprocess.run(
        [SERVING_PYTHON, "-c", PROBE, str(MODEL_PY), str(tiny_model_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "PATH": "/usr/bin:/bin"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-4000:]
    return json.loads(lines[-1][len("PROBE ") :])


def test_the_backend_drops_cors_and_http_metrics_middleware_of_vllms_real_app(probe):
    # vLLM still names them so: the filter has something to remove.
    assert set(probe["vllm_middleware"]) >= DROPPED
    assert not DROPPED & set(probe["backend_middleware"])
    # vLLM's other middleware and the one asked for (openai.json's middleware) stay, in vLLM's order.
    kept = [name for name in probe["vllm_middleware"] if name not in DROPPED]
    assert probe["backend_middleware"] == kept
    assert "GZipMiddleware" in kept


def test_vllms_prometheus_logger_gives_way_and_the_triton_logger_still_records(probe):
    assert probe["real_prometheus_loggers"] == 0
    assert "UnexportedPrometheusStatLogger" in probe["loggers"]
    assert probe["registered"] == []
    assert probe["accumulated"] == [3, 2]
    assert any(name.startswith("vllm:generation_tokens") for name in probe["registered_without"])
