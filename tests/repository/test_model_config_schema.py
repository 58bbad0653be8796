"""The bundled ModelConfig schema (schemas/triton_model_config.pb) is the one the installed tritonclient ships; rerun
scripts/build_triton_model_config.py when tritonclient moves."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from vllm_repo.repository.model_config import model_config_pb2


def test_the_bundled_schema_is_tritonclients_model_config():
    triton = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    assert model_config_pb2().DESCRIPTOR.serialized_pb == triton.DESCRIPTOR.serialized_pb


def test_config_pbtxt_parses_into_the_bundled_classes_beside_tritonclients_own():
    pytest.importorskip("tritonclient.grpc.service_pb2")  # puts tritonclient's copy in protobuf's default pool
    pb2 = model_config_pb2()
    config = text_format.Parse('backend: "vllm"\ninstance_group [ { kind: KIND_MODEL count: 2 } ]', pb2.ModelConfig())
    assert pb2.ModelInstanceGroup.Kind.Name(config.instance_group[0].kind) == "KIND_MODEL"
    assert pb2.DataType.Value("TYPE_STRING") == 13
