"""A Python backend that echoes its input, for Triton servers that need no vLLM, and repositories of it."""

from __future__ import annotations

from pathlib import Path

ECHO_BACKEND = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(cfg):
        cfg.add_input({"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]})
        cfg.add_output({"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]})
        cfg.set_max_batch_size(0)
        return cfg

    def initialize(self, args):
        if "FAIL" in args["model_name"]:
            raise RuntimeError("this model refuses to load")
        if "HANG" in args["model_name"]:  # the bundled backend's ready line, then a load that never returns
            pb_utils.Logger.log_info(f"[vllm] model {args['model_name']} ready (echo)")
            time.sleep(3600)

    def execute(self, requests):
        # "$NAME" answers the environment variable NAME as the server's processes have it.
        return [pb_utils.InferenceResponse([pb_utils.Tensor("text_output", self._answer(r))]) for r in requests]

    @staticmethod
    def _answer(request):
        text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
        if text[0].startswith(b"$"):
            return np.array([os.environ.get(text[0][1:].decode(), "").encode()], dtype=np.object_)
        return text[::-1].copy()
"""


def make_repo(root: Path, *names: str) -> Path:
    for name in names:
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text('backend: "vllm"\n')
    return root
