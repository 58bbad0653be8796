"""VR2xx config.pbtxt rules."""

import pytest

from tests.support.repo_builder import codes, only, run

FULL = """name: "llm"
backend: "vllm"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_MODEL } ]
parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
"""


def test_full_explicit_config_is_clean(repo):
    repo.model("llm", config=FULL)
    assert codes(run(repo.root)) == set()


def test_vr201_unknown_field_with_position_and_suggestion(repo):
    repo.model("llm", config=FULL.replace('{ name: "stream"', '{ nme: "stream"'))
    (d,) = only(run(repo.root), "VR201")
    assert d.line == 7 and d.column is not None
    assert "nme" in d.message and "'name'" in d.hint


@pytest.mark.parametrize(
    "written, meant",
    [("data_type: TYPE_BOOL", "data_type: TYPE_BOOLEAN"), ("kind: KIND_MODEL", "kind: KIND_MODELS")],
)
def test_vr201_unknown_enum_value_names_the_value_meant(repo, written, meant):
    repo.model("llm", config=FULL.replace(written, meant))
    (d,) = only(run(repo.root), "VR201")
    assert d.line is not None and f"'{meant.split(': ')[1]}'" in d.message, d.message
    assert d.hint == f"did you mean '{written.split(': ')[1]}'?"


def test_vr201_syntax_error(repo):
    repo.model("llm", config='backend: "vllm"\nmax_batch_size: 8k\n')
    (d,) = only(run(repo.root), "VR201")
    assert d.line == 2


def test_vr202_name_mismatch(repo):
    repo.model("llm", config=FULL.replace('name: "llm"', 'name: "other"'))
    (d,) = only(run(repo.root), "VR202")
    assert d.line == 1


def test_vr203_missing_backend_and_python_backend(repo):
    repo.model("a", config="max_batch_size: 0\n")
    repo.model("b", config='backend: "python"\n')
    repo.model("c", config='backend: "vllm_custom"\n')
    result = run(repo.root)
    by_model = {d.file.split("/")[-2]: d.severity.value for d in result.diagnostics if d.code == "VR203"}
    assert by_model == {"a": "error", "b": "info", "c": "info"}


def test_vr203_another_backend_is_noted_only_when_it_has_engine_args(repo):
    repo.model("onnx_with_args", config='backend: "onnxruntime"\n')
    repo.model("onnx_plain", config='backend: "onnxruntime"\n', engine_args=None, files={"1/model.onnx": ""})
    found = [d for d in run(repo.root).diagnostics if d.code == "VR203"]
    assert [d.file.split("/")[-2] for d in found] == ["onnx_with_args"]
    assert "does not read model.json" in found[0].message and "checked as a vLLM model" not in found[0].message


def test_vr204_explicit_decoupled_false_only(repo):
    repo.model("llm", config=FULL.replace("decoupled: true", "decoupled: False"))
    (d,) = only(run(repo.root), "VR204")
    assert d.line == 4
    repo.model("llm", config=FULL.replace("model_transaction_policy { decoupled: true }\n", ""))
    assert "VR204" not in codes(run(repo.root))


def test_vr205_nonzero_max_batch_size(repo):
    repo.model("llm", config=FULL.replace("max_batch_size: 0", "max_batch_size: 8"))
    (d,) = only(run(repo.root), "VR205")
    assert d.line == 3
    repo.model("llm", config=FULL.replace("max_batch_size: 0\n", ""))
    assert "VR205" not in codes(run(repo.root))


def test_vr206_contract_names_and_types(repo):
    config = FULL.replace('name: "stream" data_type: TYPE_BOOL', 'name: "stream" data_type: TYPE_STRING')
    config = config.replace('name: "text_output"', 'name: "text_outputs"')
    repo.model("llm", config=config)
    found = only(run(repo.root), "VR206")
    messages = " ".join(d.message for d in found)
    assert "TYPE_STRING" in messages and "text_outputs" in messages
    assert any(d.hint == "did you mean 'text_output'?" for d in found)


def test_vr206_optional_input_not_marked_optional_is_a_warning(repo):
    repo.model("llm", config=FULL.replace(" optional: true }", " }"))
    (d,) = only(run(repo.root), "VR206")
    assert d.severity.value == "warning"


def test_vr207_instance_group(repo):
    repo.model("llm", config=FULL.replace("count: 1 kind: KIND_MODEL", "count: 2 kind: KIND_MODEL gpus: [0, 0]"))
    found = only(run(repo.root), "VR207")
    assert {d.severity.value for d in found} == {"warning", "error"}


def test_vr208_parameters(repo):
    bad = FULL.replace('string_value: "true"', 'string_value: "yes please"')
    bad += 'parameters { key: "gpu_memory_utilization" value: { string_value: "0.5" } }\n'
    bad += 'parameters { key: "REPORT_CUSTOM_METRIC" value: { string_value: "true" } }\n'
    repo.model("llm", config=bad)
    found = {d.message.split()[1]: d for d in only(run(repo.root), "VR208")}
    assert found["REPORT_CUSTOM_METRICS"].severity.value == "error"
    assert "model.json" in found["'gpu_memory_utilization'"].hint
    assert found["'REPORT_CUSTOM_METRIC'"].hint == "did you mean 'REPORT_CUSTOM_METRICS'?"


def test_vr208_gpu_device_ids_is_a_backend_parameter(repo):
    config = FULL + 'parameters { key: "GPU_DEVICE_IDS" value: { string_value: "0" } }\n'
    repo.model("llm", config=config)
    assert "VR208" not in codes(run(repo.root))
