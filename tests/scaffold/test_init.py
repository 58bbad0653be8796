"""init: the files it writes, what it refuses, and that it never leaves a half-written model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.errors import UsageError
from vllm_repo.estimate.packing import DEFAULT_MARGIN_FRACTION
from vllm_repo.scaffold import InitError, default_model_name, init_model, parse_settings
from vllm_repo.scaffold import init as scaffold
from vllm_repo.validate import validate_paths


def parse_config(path):
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def staging_leftovers(repo):
    return [p.name for p in repo.iterdir() if p.name.startswith(scaffold.STAGING_PREFIX)] if repo.exists() else []


def test_writes_explicit_config_and_engine_args_that_pass_validate(tmp_path, hf_model):
    repo = tmp_path / "model_repository"
    result = init_model(repo, str(hf_model))

    assert result.model_dir == repo / "tiny-llama"
    assert sorted(p.relative_to(repo).as_posix() for p in result.files) == [
        "tiny-llama/1/model.json",
        "tiny-llama/config.pbtxt",
    ]
    config = parse_config(repo / "tiny-llama" / "config.pbtxt")
    assert config.name == "tiny-llama"
    assert config.backend == "vllm"
    assert config.max_batch_size == 0
    assert config.model_transaction_policy.decoupled is True
    types = model_config_pb2.DataType
    assert [(i.name, types.Name(i.data_type), tuple(i.dims), i.optional) for i in config.input] == [
        (t.name, t.data_type, t.dims, t.optional) for t in contract.INPUTS
    ]
    assert [(o.name, types.Name(o.data_type), tuple(o.dims)) for o in config.output] == [
        (t.name, t.data_type, t.dims) for t in contract.OUTPUTS
    ]
    assert [(g.count, model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)) for g in config.instance_group] == [
        (1, "KIND_MODEL")
    ]
    assert config.parameters["REPORT_CUSTOM_METRICS"].string_value == "true"

    engine_args = json.loads((repo / "tiny-llama" / "1" / "model.json").read_text())
    # A local model is written as an absolute path: the server's working directory is not the user's.
    assert engine_args["model"] == str(hf_model.resolve())
    # Metrics need vLLM's stats on.
    assert engine_args["disable_log_stats"] is False

    check = validate_paths([repo])
    assert not check.has_errors, [d.message for d in check.diagnostics]
    assert staging_leftovers(repo) == []


def test_refuses_to_overwrite_without_force(tmp_path, hf_model):
    repo = tmp_path / "repo"
    init_model(repo, str(hf_model), max_model_len=256)
    before = {p: p.read_bytes() for p in (repo / "tiny-llama").rglob("*") if p.is_file()}

    with pytest.raises(InitError) as err:
        init_model(repo, str(hf_model), max_model_len=512)
    assert "already exists" in err.value.message and "--force" in err.value.hint
    assert {p: p.read_bytes() for p in (repo / "tiny-llama").rglob("*") if p.is_file()} == before


def test_force_replaces_the_model_in_one_piece(tmp_path, hf_model):
    repo = tmp_path / "repo"
    init_model(repo, str(hf_model), max_model_len=256)
    (repo / "tiny-llama" / "1" / "stale.txt").write_text("from the old model")

    result = init_model(repo, str(hf_model), max_model_len=512, force=True)

    assert result.replaced
    assert json.loads((repo / "tiny-llama" / "1" / "model.json").read_text())["max_model_len"] == 512
    # The old directory is replaced, not merged into.
    assert not (repo / "tiny-llama" / "1" / "stale.txt").exists()
    assert staging_leftovers(repo) == []


def test_failure_midway_leaves_nothing_behind(tmp_path, hf_model, monkeypatch):
    repo = tmp_path / "repo"
    calls = []
    real_write = scaffold._write

    def write_then_fail(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C between two files
        real_write(path, text)

    monkeypatch.setattr(scaffold, "_write", write_then_fail)
    with pytest.raises(KeyboardInterrupt):
        init_model(repo, str(hf_model))
    assert not (repo / "tiny-llama").exists()
    assert staging_leftovers(repo) == []


def test_failure_during_force_keeps_the_old_model(tmp_path, hf_model, monkeypatch):
    repo = tmp_path / "repo"
    init_model(repo, str(hf_model), max_model_len=256)
    old = (repo / "tiny-llama" / "1" / "model.json").read_bytes()

    def fail(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scaffold, "_write", fail)
    with pytest.raises(OSError):
        init_model(repo, str(hf_model), max_model_len=512, force=True)
    assert (repo / "tiny-llama" / "1" / "model.json").read_bytes() == old
    assert staging_leftovers(repo) == []


def test_a_killed_init_leaves_only_a_hidden_staging_directory_that_the_next_init_removes(tmp_path, hf_model):
    repo = tmp_path / "repo"
    repo.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = repo / f"{scaffold.STAGING_PREFIX}killed"
    (stale / "half").mkdir(parents=True)
    (stale / ".pid").write_text(dead.stdout.strip())

    init_model(repo, str(hf_model))
    assert not stale.exists()
    assert sorted(p.name for p in repo.iterdir()) == ["tiny-llama"]


@pytest.mark.parametrize(
    "name", ["../escape", "a/b", ".hidden", "has space", "", "-dash", "1", "x" * 129, "semi;colon"]
)
def test_unsafe_names_are_refused(tmp_path, hf_model, name):
    with pytest.raises(UsageError) as err:
        init_model(tmp_path / "repo", str(hf_model), name=name)
    assert err.value.hint
    assert not (tmp_path / "repo").exists() or list((tmp_path / "repo").iterdir()) == []


@pytest.mark.parametrize(
    "model, name",
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
        ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct"),
        ("/data/models/my model (v2)/", "my-model-v2"),
        ("gpt2", "gpt2"),
    ],
)
def test_default_names_are_safe_directory_names(model, name):
    assert default_model_name(model) == name


def test_settings_are_typed_by_the_engine_args_schema():
    from vllm_repo.schema.loader import load_schema

    schema = load_schema("0.32.0")
    settings = parse_settings(
        ["max_model_len=4096", "enforce_eager=true", "revision=1234", "dtype=bfloat16", "gpu_memory_utilization=0.5"],
        schema,
    )
    assert settings == {
        "max_model_len": 4096,
        "enforce_eager": True,
        "revision": "1234",
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.5,
    }


def test_a_bad_setting_is_refused_with_validate_findings_and_nothing_is_written(tmp_path, hf_model):
    repo = tmp_path / "repo"
    with pytest.raises(InitError) as err:
        init_model(repo, str(hf_model), settings={"dtype": "bf16", "max_model_len": 100000})
    codes = {d.code for d in err.value.diagnostics if d.severity.value == "error"}
    assert len(codes) >= 2  # the bad dtype and max_model_len above the model's 512 positions
    assert any("bfloat16" in (d.hint or "") for d in err.value.diagnostics)
    assert all(".vllm-repo-init-" not in (d.file or "") for d in err.value.diagnostics)
    assert not (repo / "tiny-llama").exists()


def test_a_model_on_a_gpu_others_use_gets_what_they_leave(tmp_path, hf_model):
    repo = tmp_path / "repo"
    init_model(repo, str(hf_model), name="first", settings={"gpu_memory_utilization": 0.6})
    second = init_model(repo, str(hf_model), name="second", gpu="L4")
    share = second.engine_args["gpu_memory_utilization"]
    assert 0.6 + share <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9 and share >= 0.3  # what is left, less plan's margin
    assert any("what the other models on the same GPU leave (first 0.6)" in note for note in second.notes)
    assert not validate_paths([repo]).has_errors
    # Replacing a model: its own share is not counted against it.
    again = init_model(repo, str(hf_model), name="second", gpu="L4", force=True)
    assert again.engine_args["gpu_memory_utilization"] == share
    # Nothing left: the model is created without a share, and the note names what sizes them all.
    third = init_model(repo, str(hf_model), name="third", gpu="L4")
    assert "gpu_memory_utilization" not in third.engine_args
    assert any("first 0.6 + second" in note and "--pack all --write" in note for note in third.notes), third.notes
    # A share the user gives is theirs: validate's finding refuses it when it overcommits the GPU.
    with pytest.raises(InitError) as err:
        init_model(repo, str(hf_model), name="fourth", settings={"gpu_memory_utilization": 0.5})
    assert any(d.code == "VR504" for d in err.value.diagnostics)


def test_lora_adapters_go_to_multi_lora_json(tmp_path, hf_model):
    adapter = tmp_path / "adapters" / "sql"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16, "peft_type": "LORA"}))
    repo = tmp_path / "repo"
    result = init_model(repo, str(hf_model), loras=scaffold.parse_loras([f"sql={adapter}"]))

    version_dir = repo / "tiny-llama" / "1"
    assert json.loads((version_dir / "multi_lora.json").read_text()) == {"sql": str(adapter.resolve())}
    assert json.loads((version_dir / "model.json").read_text())["enable_lora"] is True
    assert version_dir / "multi_lora.json" in result.files
    assert "max_lora_rank" not in json.loads((version_dir / "model.json").read_text())  # r=8: vLLM's default holds it
    assert not validate_paths([repo]).has_errors


def test_a_high_rank_adapter_raises_max_lora_rank_to_a_rank_vllm_accepts(tmp_path, hf_model):
    adapters = {}
    for name, rank in (("small", 8), ("big", 48)):
        path = tmp_path / "adapters" / name
        path.mkdir(parents=True)
        (path / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
        adapters[name] = str(path)
    result = init_model(tmp_path / "repo", str(hf_model), loras=adapters)
    engine_args = json.loads((result.model_dir / "1" / "model.json").read_text())
    assert engine_args["max_lora_rank"] == 64  # vLLM 0.32 takes 1, 8, 16, 32, 64, ...: the first >= 48
    assert engine_args["max_loras"] == 2


def test_without_gpu_init_says_what_it_left_unsized(tmp_path, hf_model):
    result = init_model(tmp_path / "repo", str(hf_model), tensor_parallel_size=1)
    assert len(result.notes) == 1
    assert "gpu_memory_utilization" in result.notes[0] and "tensor_parallel_size" not in result.notes[0]


def run_cli(*args, cwd):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "vllm_repo", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_cli_init_then_refusal_is_a_clear_error_not_a_traceback(tmp_path, hf_model):
    done = run_cli("init", "repo", "--model", str(hf_model), "--set", "max_model_len=256", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "repo/tiny-llama/config.pbtxt" in done.stdout

    again = run_cli("init", "repo", "--model", str(hf_model), cwd=tmp_path)
    assert again.returncode == 1
    assert "already exists" in again.stderr and "--force" in again.stderr
    assert "Traceback" not in again.stderr

    bad = run_cli("init", "repo", "--model", str(hf_model), "--name", "x", "--set", "nonsense", cwd=tmp_path)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr

    validated = run_cli("validate", "repo", cwd=tmp_path)
    assert validated.returncode == 0, validated.stdout + validated.stderr
