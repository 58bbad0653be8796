"""Models the backend refuses to load, in a real Triton server: the server log says which file, which key and what
to do (not a TypeError from deep inside vLLM). The errors come before any engine starts, so this takes seconds."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.serving import SERVING_PYTHON, TRITON_HOME, needs_serving
from vllm_repo.serve.errors import TritonServerError
from vllm_repo.serve.server import TritonServer

pytestmark = [pytest.mark.e2e, needs_serving]

MODELS = {
    # name: (config.pbtxt extra, model.json text)
    "typo": ("", json.dumps({"model": "/nonexistent", "gpu_memory_utilisation": 0.5})),
    "badjson": ("", '{"model": "/nonexistent",\n  "dtype": "float32",,\n}'),
    "badparam": (
        'parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "maybe" } }\n',
        json.dumps({"model": "/nonexistent"}),
    ),
    "nojson": ("", None),
    "lora": ("", json.dumps({"model": "/nonexistent", "enable_lora": True})),
}


def test_load_errors_name_the_file_the_key_and_the_fix(tmp_path):
    repo = tmp_path / "repo"
    for name, (extra, model_json) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text('backend: "vllm"\n' + extra)
        if model_json is not None:
            (repo / name / "1" / "model.json").write_text(model_json)
    server = TritonServer(repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME)
    server.start()
    try:
        with pytest.raises(TritonServerError, match="exited with status"):
            server.wait_ready(timeout=300)
    finally:
        server.stop()
    log = server.log_text()
    assert re.search(
        r'typo/1/model\.json: "gpu_memory_utilisation" is not a vLLM [\d.]+ engine argument '
        r'\(did you mean "gpu_memory_utilization"\?\)',
        log,
    ), log[-3000:]
    assert re.search(r"badjson/1/model\.json:2:\d+: invalid JSON", log), log[-3000:]
    assert re.search(r'config\.pbtxt parameter REPORT_CUSTOM_METRICS: \\?"maybe\\?" is not a boolean', log), log[-3000:]
    assert re.search(r"nojson/1/model\.json: not found; each model version needs", log), log[-3000:]
    assert re.search(r"lora/1/multi_lora\.json: not found", log), log[-3000:]
    assert "TypeError" not in log
