"""VR1xx layout rules: each with a case that triggers it and one that must not."""

from tests.support.repo_builder import OFFICIAL_CONFIG, codes, only, run


def test_official_layout_is_clean(repo):
    repo.model("llm")
    result = run(repo.root)
    assert not result.has_errors
    assert codes(result) == set()


def test_vr101_missing_config_with_misnamed_file(repo):
    repo.model("llm", config=None, files={"config.pbxt": OFFICIAL_CONFIG})
    (d,) = only(run(repo.root), "VR101")
    assert d.severity.value == "error"
    assert "config.pbxt" in d.hint
    assert d.file.endswith("llm")


def test_vr102_non_numeric_version_directory(repo):
    repo.model("llm", version="model_v1")
    (d,) = only(run(repo.root), "VR102")
    assert "model_v1" in d.message and "rename it to 1" in d.hint


def test_vr102_not_raised_with_numeric_version(repo):
    repo.model("llm", version="3")
    assert "VR102" not in codes(run(repo.root))


ENSEMBLE_CONFIG = """platform: "ensemble"
input [ { name: "prompt" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text" data_type: TYPE_STRING dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "llm" model_version: -1
  input_map { key: "text_input" value: "prompt" } output_map { key: "text_output" value: "text" } } ] }
"""


def test_models_of_other_backends_and_platforms_get_no_vllm_rule(repo):
    repo.model("llm")
    (repo.model("ensemble", config=ENSEMBLE_CONFIG, engine_args=None) / "1").mkdir()
    repo.model(
        "bls",
        config='backend: "python"\ninstance_group [ { kind: KIND_CPU } ]\n',
        engine_args=None,
        files={"1/model.py": "class TritonPythonModel:\n    pass\n", "1/settings.json": "{}"},
    )
    repo.model("onnx", config='platform: "onnxruntime_onnx"\n', engine_args=None, files={"1/model.onnx": ""})
    repo.model("inferred", config="max_batch_size: 8\n", engine_args=None, files={"1/model.plan": ""})
    result = run(repo.root)
    about_others = [
        (d.code, d.message)
        for d in result.diagnostics
        if any(f"/{name}" in d.file for name in ("ensemble", "bls", "onnx", "inferred"))
    ]
    assert about_others == []
    assert not result.has_errors, [(d.code, d.message) for d in result.diagnostics]


def test_vr102_an_ensemble_without_a_version_directory_needs_an_empty_one(repo):
    repo.model("llm")
    repo.model("ensemble", config=ENSEMBLE_CONFIG, engine_args=None)
    (d,) = only(run(repo.root), "VR102")
    assert d.file.endswith("ensemble") and d.hint == "create ensemble/1/, an empty directory"
    assert "model.json" not in d.hint


def test_vr103_model_json_beside_config_is_still_checked(repo):
    repo.model("llm", engine_args=None, files={"model.json": '{"model": "m", "dtype": "bf16"}'})
    result = run(repo.root)
    (d,) = only(result, "VR103")
    assert d.file.endswith("llm/model.json") and "llm/1/model.json" in d.hint
    # The misplaced file's content gets the engine-args checks too, so the user fixes both at once.
    assert "VR304" in codes(result)


def test_vr104_version_without_model_json_suggests_rename(repo):
    repo.model("llm", engine_args=None, files={"1/models.json": '{"model": "m"}'})
    (d,) = only(run(repo.root), "VR104")
    assert d.hint == "rename models.json to model.json"


def test_vr105_stray_files(repo):
    repo.model("llm", files={".DS_Store": "x", "1/model.cpython-310.pyc": "x"})
    found = only(run(repo.root), "VR105")
    assert {d.file.rsplit("/", 1)[-1] for d in found} == {".DS_Store", "model.cpython-310.pyc"}


def test_vr106_model_py_in_vllm_model(repo):
    repo.model("llm", files={"1/model.py": "print()"})
    assert "VR106" in codes(run(repo.root))
    repo.model("other", config='backend: "python"\n', files={"1/model.py": "print()"})
    assert all(d.file.find("other") < 0 for d in run(repo.root).diagnostics if d.code == "VR106")


def test_vr107_unsafe_model_name(repo):
    repo.model("eagle_model copy")
    (d,) = only(run(repo.root), "VR107")
    assert "eagle_model_copy" in d.hint
    assert "VR107" not in codes(run(repo.model("fine-name_1.0")))


def test_vr108_ignored_directory_is_info(repo):
    repo.model("llm", files={"notes/readme.txt": "x"})
    (d,) = only(run(repo.root), "VR108")
    assert d.severity.value == "info"


def test_single_file_paths_map_to_their_model(repo):
    repo.model("a", engine_args={"model": "m", "dtype": "bf16"})
    repo.model("b", engine_args={"model": "m", "dtype": "bf16"})
    result = run(repo.root / "a" / "1" / "model.json")
    assert len(result.models) == 1 and result.models[0].endswith("/a")
    assert {d.file.split("/")[-3] for d in result.diagnostics if d.code == "VR304"} == {"a"}


def test_findings_name_the_path_given_not_a_symlink_target(repo, tmp_path):
    model = repo.model("llm", engine_args=None, config='backend: "vllm"\n')
    real = tmp_path / "elsewhere" / "model.json"
    real.parent.mkdir()
    real.write_text('{"model": "m", "dtype": "bf16"}')
    (model / "1").mkdir()
    (model / "1" / "model.json").symlink_to(real)
    (d,) = only(run(repo.root), "VR304")
    assert d.file.endswith("llm/1/model.json")
