"""Triton's own ModelConfig protobuf (model_config.proto, the schema of config.pbtxt), built from the schema that
tritonclient ships, bundled as its serialized descriptor (schemas/triton_model_config.pb, written by
scripts/build_triton_model_config.py).

Only protobuf is needed: validate, and the pre-commit hook's environment, go without tritonclient and its grpc, numpy
and gevent (tritonclient is in the ``full`` extra, for the OpenAI gateway)."""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

from vllm_repo.errors import VllmRepoError

SCHEMA_FILE = "triton_model_config.pb"


@functools.cache
def model_config_pb2() -> ModuleType:
    """A module as tritonclient's generated ``model_config_pb2``: ModelConfig, ModelInstanceGroup, DataType, ...

    Its classes live in a descriptor pool of their own, so they never clash with tritonclient's copy where the
    gateway imports that into protobuf's default pool."""
    from google.protobuf import descriptor_pool
    from google.protobuf.internal import builder

    package = Path(__file__).resolve().parent.parent
    # Installed, the schemas are the package's _schemas; in a checkout, the top-level schemas/ folder beside it.
    found = [p for p in (package / "_schemas" / SCHEMA_FILE, package.parent / "schemas" / SCHEMA_FILE) if p.is_file()]
    if not found:
        raise VllmRepoError(
            f"Triton's ModelConfig schema ({SCHEMA_FILE}, in vllm_repo._schemas) is missing",
            hint="the installation is incomplete: reinstall vllm-repo",
        )
    path = found[0]
    descriptor = descriptor_pool.DescriptorPool().AddSerializedFile(path.read_bytes())
    module = ModuleType("vllm_repo._triton_model_config_pb2")
    names = vars(module)
    names["DESCRIPTOR"] = descriptor
    # What a generated _pb2 module runs at import (protobuf's builder): its message classes and enums, by name.
    builder.BuildMessageAndEnumDescriptors(descriptor, names)
    builder.BuildTopDescriptorsAndMessages(descriptor, module.__name__, names)
    return module
