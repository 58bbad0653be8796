"""Triton's own ModelConfig protobuf (model_config.proto, the schema of config.pbtxt), as tritonclient ships it."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

from vllm_repo.errors import VllmRepoError


@functools.cache
def model_config_pb2() -> ModuleType:
    """Triton's ModelConfig protobuf module from tritonclient, loaded straight from its file.

    `import tritonclient.grpc` pulls in grpc and the whole client (~0.25 s); the generated module needs only
    protobuf, and validate has to start fast."""
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise VllmRepoError(
            "tritonclient, which holds Triton's ModelConfig protobuf, is not installed",
            hint="pip install 'tritonclient[grpc]' (a dependency of vllm-repo: reinstall it)",
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    mod_spec = importlib.util.spec_from_file_location("vllm_repo._triton_model_config_pb2", path)
    # A path ending in .py always gets a spec with a loader (SourceFileLoader), whether or not the file is there.
    assert mod_spec is not None and mod_spec.loader is not None
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module
