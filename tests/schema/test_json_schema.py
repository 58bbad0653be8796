"""The JSON Schema for model.json: valid draft 2020-12, accepts good files, rejects the classic mistakes."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from vllm_repo.schema.json_schema import model_json_schema
from vllm_repo.schema.loader import bundled_versions, load_schema

NEWEST = bundled_versions()[-1]


def _validator(version: str) -> Draft202012Validator:
    document = model_json_schema(load_schema(version))
    Draft202012Validator.check_schema(document)
    return Draft202012Validator(document)


def _errors(version: str, instance: dict) -> dict[str, str]:
    found = {}
    for error in _validator(version).iter_errors(instance):
        where = ".".join(str(p) for p in error.absolute_path) or error.validator
        found[where] = error.message
    return found


@pytest.mark.parametrize("version", bundled_versions())
def test_every_bundled_release_gives_a_valid_schema(version: str) -> None:
    schema = load_schema(version)
    document = model_json_schema(schema)
    Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert set(document["properties"]) == set(schema.fields)
    assert document["additionalProperties"] is False


def test_a_good_model_json_validates() -> None:
    good = {
        "model": "/models/llama",
        "dtype": "bfloat16",
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.85,
        "enforce_eager": True,
        "tensor_parallel_size": 2,
        "max_num_seqs": 64,
        "seed": 0,
        "trust_remote_code": False,
        "quantization": None,
        "compilation_config": {"mode": 3},
    }
    assert _errors(NEWEST, good) == {}
    # An integer is a valid JSON number (gpu_memory_utilization: 1).
    assert _errors(NEWEST, {"model": "m", "gpu_memory_utilization": 1}) == {}


def test_classic_mistakes_are_rejected_where_they_are() -> None:
    bad = {
        "model": "m",
        "dtype": "bf16",
        "enforce_eager": "true",
        "max_model_len": "8k",
        "max_num_seqs": 1.5,
        "temperature": 0.7,
    }
    errors = _errors(NEWEST, bad)
    assert set(errors) == {"dtype", "enforce_eager", "max_model_len", "max_num_seqs", "additionalProperties"}
    assert "temperature" in errors["additionalProperties"]


def test_descriptions_come_from_vllm_help_text() -> None:
    schema = load_schema(NEWEST)
    document = model_json_schema(schema)
    prop = document["properties"]["max_model_len"]
    assert prop["description"].startswith(schema.fields["max_model_len"].help.splitlines()[0])
    assert "--max-model-len" in prop["description"]
    deprecated = [name for name, f in schema.fields.items() if f.deprecated]
    for name in deprecated:
        assert document["properties"][name]["deprecated"] is True


def test_a_key_of_an_older_release_is_unknown_to_a_newer_schema() -> None:
    old = [v for v in bundled_versions() if "disable_log_requests" in load_schema(v).fields]
    new = [
        v
        for v in bundled_versions()
        if "disable_log_requests" not in load_schema(v).fields and "enable_log_requests" in load_schema(v).fields
    ]
    if not old or not new:
        pytest.skip("no bundled release pair around the disable_log_requests rename")
    instance = {"model": "m", "disable_log_requests": True}
    assert _errors(old[-1], instance) == {}
    assert "additionalProperties" in _errors(new[0], instance)


def test_documented_values_of_open_string_fields_are_offered_not_enforced() -> None:
    from vllm_repo.schema.json_schema import raw_fields

    extras = raw_fields(NEWEST)
    open_fields = {name: spec["suggestions"] for name, spec in extras.items() if spec.get("suggestions")}
    if not open_fields:
        pytest.skip(f"no field of {NEWEST} takes any string beside documented values")
    document = model_json_schema(load_schema(NEWEST), extras)
    validator = Draft202012Validator(document)
    for name, values in open_fields.items():
        assert document["properties"][name]["examples"] == values
        assert "enum" not in document["properties"][name]
        assert not list(validator.iter_errors({"model": "m", name: "my_own_value"})), name
