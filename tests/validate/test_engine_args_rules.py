"""VR3xx model.json rules, against the bundled EngineArgs schema of vLLM 0.32.0."""

from tests.support.repo_builder import VERSION, codes, only, run
from vllm_repo.schema.loader import load_schema


def test_vr301_json_syntax_error_position(repo):
    repo.model("llm", engine_args='{\n  "model": "m",\n  "dtype": "auto"\n  "seed": 1\n}')
    (d,) = only(run(repo.root), "VR301")
    # Where the comma goes: right after "auto" on line 3, not where the decoder stopped.
    assert (d.line, d.column) == (3, 18) and "comma is missing" in d.message


def test_vr301_not_an_object(repo):
    repo.model("llm", engine_args="[1, 2]")
    assert "not an object" in only(run(repo.root), "VR301")[0].message


def test_vr302_unknown_key_did_you_mean_and_line(repo):
    repo.model("llm", engine_args='{\n  "model": "m",\n  "gpu_memory_utilisation": 0.5\n}')
    (d,) = only(run(repo.root), "VR302")
    assert d.line == 3 and d.hint == "did you mean 'gpu_memory_utilization'?"


def test_vr302_never_suggests_the_key_that_means_the_opposite(repo):
    repo.model("llm", engine_args={"model": "m", "disable_log_requests": True, "enable_custom_all_reduce": True})
    found = {d.message.split("'")[1]: d for d in only(run(repo.root), "VR302")}
    # A removed key with a value table: what to write instead, with the value that keeps the meaning.
    assert found["disable_log_requests"].hint.startswith('write "enable_log_requests": false instead')
    # A key the release has the other way round: no did-you-mean that, followed, inverts the setting.
    assert "did you mean" not in found["enable_custom_all_reduce"].hint
    assert "disable_custom_all_reduce" in load_schema(VERSION).fields  # the near name exists, and is inverted


def test_vr302_sampling_key_hint(repo):
    repo.model("llm", engine_args={"model": "m", "temperature": 0.7})
    (d,) = only(run(repo.root), "VR302")
    assert "sampling_parameters" in d.hint


def test_vr302_not_raised_for_known_keys(repo):
    repo.model("llm", engine_args={"model": "m", "max_model_len": 4096, "dtype": "float16"})
    assert "VR302" not in codes(run(repo.root))


def test_vr303_string_boolean_and_size_suffix(repo):
    repo.model("llm", engine_args={"model": "m", "enforce_eager": "true", "max_model_len": "8k"})
    found = {d.message.split("'")[1]: d for d in only(run(repo.root), "VR303")}
    assert found["enforce_eager"].hint == "write true without quotes"
    assert found["max_model_len"].hint == "write the number itself, e.g. 8192"


def test_vr303_integer_is_a_valid_float(repo):
    repo.model("llm", engine_args={"model": "m", "gpu_memory_utilization": 1})
    assert "VR303" not in codes(run(repo.root))


def test_vr304_choice_with_alias(repo):
    repo.model("llm", engine_args={"model": "m", "dtype": "bf16"})
    (d,) = only(run(repo.root), "VR304")
    assert d.hint == 'did you mean "bfloat16"?'


def test_vr305_ranges(repo):
    repo.model("llm", engine_args={"model": "m", "gpu_memory_utilization": 1.5, "tensor_parallel_size": 0})
    found = only(run(repo.root), "VR305")
    assert len(found) == 2
    repo.model("llm", engine_args={"model": "m", "gpu_memory_utilization": 1.0, "max_model_len": -1})
    assert "VR305" not in codes(run(repo.root))


def test_vr306_model_missing(repo):
    repo.model("llm", engine_args={"gpu_memory_utilization": 0.5})
    (d,) = only(run(repo.root), "VR306")
    assert d.severity.value == "error"


def test_vr307_trust_remote_code_is_a_warning(repo):
    repo.model("llm", engine_args={"model": "m", "trust_remote_code": True})
    assert only(run(repo.root), "VR307")[0].severity.value == "warning"
    repo.model("llm", engine_args={"model": "m", "trust_remote_code": False})
    assert "VR307" not in codes(run(repo.root))


def test_vr308_duplicate_key(repo):
    repo.model("llm", engine_args='{"model": "m",\n "enforce_eager": true,\n "enforce_eager": false}')
    (d,) = only(run(repo.root), "VR308")
    assert d.line == 3


def test_strict_turns_warnings_into_errors(repo):
    repo.model("llm", engine_args={"model": "m", "trust_remote_code": True})
    assert not run(repo.root).has_errors
    assert run(repo.root, strict=True).has_errors


def test_removed_key_is_explained_for_the_release(repo):
    repo.model("llm", engine_args={"model": "m", "disable_log_requests": True})
    (d,) = only(run(repo.root), "VR302")
    assert "was removed in" in d.message and "enable_log_requests" in d.message
    # In a release that still has the key it is accepted.
    from vllm_repo.schema.loader import bundled_versions, load_schema

    older = [v for v in bundled_versions() if load_schema(v).get("disable_log_requests") is not None]
    assert "VR302" not in codes(run(repo.root, vllm_version=older[-1]))


def test_vr309_deprecated_engine_arg():
    from vllm_repo.schema.loader import load_schema

    deprecated = [f for f in load_schema("0.32.0").fields.values() if f.deprecated]
    assert deprecated, "the 0.32.0 schema marks some engine arguments deprecated"


def test_vr309_reported_and_not_for_current_keys(repo):
    from vllm_repo.schema.loader import load_schema

    name = next(f.name for f in load_schema("0.32.0").fields.values() if f.deprecated)
    value = load_schema("0.32.0").fields[name].default
    repo.model("llm", engine_args={"model": "m", name: value})
    (d,) = only(run(repo.root), "VR309")
    assert name in d.message
    repo.model("llm", engine_args={"model": "m", "enforce_eager": True})
    assert "VR309" not in codes(run(repo.root))


def test_vr310_a_local_model_path_that_does_not_exist(repo, tmp_path):
    missing = tmp_path / "models" / "gone"
    repo.model("llm", engine_args={"model": str(missing), "tokenizer": "./tokenizers/also-gone"})
    found = only(run(repo.root), "VR310")
    assert {d.message.split("'")[1] for d in found} == {"model", "tokenizer"}
    assert all("does not exist here" in d.message and "container" in d.hint for d in found)


def test_vr310_existing_paths_and_repo_ids_are_fine(repo, tmp_path):
    present = tmp_path / "models" / "here"
    present.mkdir(parents=True)
    repo.model("a", engine_args={"model": str(present), "tokenizer": "Qwen/Qwen2.5-0.5B-Instruct"})
    repo.model("b", engine_args={"model": "gpt2"})
    (repo.root / "c" / "1" / "weights").mkdir(parents=True)  # relative to the model directory
    repo.model("c", engine_args={"model": "1/weights"})
    assert "VR310" not in codes(run(repo.root))
