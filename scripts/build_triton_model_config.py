#!/usr/bin/env python3
"""Regenerate schemas/triton_model_config.pb: Triton's ModelConfig schema (model_config.proto, the schema of
config.pbtxt), as the serialized FileDescriptorProto that tritonclient's generated model_config_pb2 carries.

    python scripts/build_triton_model_config.py      # in an environment with tritonclient installed

vllm-repo builds the ModelConfig message classes from this file with protobuf alone: validate (and the pre-commit
hook's environment) needs neither tritonclient nor its grpc, numpy and gevent. tests/repository/
test_model_config_schema.py checks that the file is the installed tritonclient's schema.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_repo.files import write_atomic
from vllm_repo.repository.model_config import SCHEMA_FILE


def main() -> None:
    from tritonclient.grpc import model_config_pb2

    target = ROOT / "schemas" / SCHEMA_FILE
    write_atomic(target, model_config_pb2.DESCRIPTOR.serialized_pb)
    print(f"wrote {target.relative_to(ROOT)} ({len(model_config_pb2.DESCRIPTOR.serialized_pb)} bytes)")


if __name__ == "__main__":
    main()
