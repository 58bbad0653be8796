"""model.json's settings as one typed object: what the readers of model.json get, strict and lenient."""

from __future__ import annotations

import pytest

from vllm_repo.errors import UsageError
from vllm_repo.repository.engine_settings import EngineSettings, read_engine_settings
from vllm_repo.schema.loader import load_schema, schema_for_release
from vllm_repo.settings import resolve_settings


def test_typed_values_and_quoted_ones_as_triton_backend_files_write_them():
    settings = read_engine_settings(
        {
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "tensor_parallel_size": "2",
            "gpu_memory_utilization": "0.5",
            "enforce_eager": "true",
            "max_model_len": 8192.0,
            "disable_log_stats": True,  # not one vllm-repo reasons about: left in the file
        }
    )
    assert settings.model == "Qwen/Qwen2.5-7B-Instruct"
    assert (settings.tensor_parallel_size, settings.gpu_memory_utilization) == (2, 0.5)
    assert settings.enforce_eager is True and settings.max_model_len == 8192
    assert settings.parallel_size == 2 and settings.given()["max_model_len"] == 8192


def test_a_value_of_the_wrong_form_reads_as_absent_leniently_and_is_an_error_strictly():
    data = {"tensor_parallel_size": "two", "max_model_len": 4096}
    lenient = read_engine_settings(data)
    assert lenient.tensor_parallel_size is None and lenient.tp == 1 and lenient.max_model_len == 4096
    with pytest.raises(UsageError, match="tensor_parallel_size: expected an integer, got 'two'"):
        read_engine_settings(data, strict=True)
    with pytest.raises(UsageError, match="enforce_eager: expected true or false"):
        read_engine_settings({"enforce_eager": 1}, strict=True)


def test_sizes_below_one_count_as_one_gpu_but_keep_what_the_file_says():
    settings = read_engine_settings({"tensor_parallel_size": 0, "pipeline_parallel_size": 3, "nnodes": -1})
    assert settings.tensor_parallel_size == 0  # the estimate refuses it, as vLLM does
    assert (settings.tp, settings.pp, settings.parallel_size, settings.hosts) == (1, 3, 3, 1)


def test_numbers_beyond_float_range_read_as_huge_leniently_and_are_refused_strictly():
    assert read_engine_settings({"gpu_memory_utilization": 10**400}).gpu_memory_utilization >= 1e300
    with pytest.raises(UsageError, match="out of range"):
        read_engine_settings({"gpu_memory_utilization": 10**400}, strict=True)
    assert read_engine_settings({"gpu_memory_utilization": float("nan")}).gpu_memory_utilization is None


def test_flags_win_over_the_file_and_none_leaves_the_file_value():
    settings = EngineSettings(max_model_len=4096, tensor_parallel_size=2)
    changed = settings.overridden_by(max_model_len=None, tensor_parallel_size=4, dtype="half")
    assert (changed.max_model_len, changed.tensor_parallel_size, changed.dtype) == (4096, 4, "half")
    assert settings.tensor_parallel_size == 2  # frozen: the original is untouched


def test_the_default_memory_share_comes_from_the_release_schema():
    # 0.20.2 is the first bundled release with 0.92 (its EngineArgs say so); 0.19.0 has 0.9.
    assert schema_for_release("0.20.2").default_gpu_memory_utilization == 0.92
    assert schema_for_release("0.19.5").vllm_version == "0.19.0"
    assert load_schema("0.19.0").default_gpu_memory_utilization == 0.9
    assert schema_for_release("0.1.0") is None
    assert EngineSettings().gpu_memory_utilization_or(0.92) == 0.92
    assert EngineSettings(gpu_memory_utilization=0.3).gpu_memory_utilization_or(0.92) == 0.3


def test_estimate_release_uses_the_same_default_as_the_placement_checks():
    from vllm_repo.releases.memory_budget import resolve_release

    for version in ("0.19.0", "0.20.2", "0.26.0"):
        release, _ = resolve_release(version)
        assert release.default_gpu_memory_utilization == load_schema(version).default_gpu_memory_utilization


def test_command_line_settings_win_over_the_project_file(tmp_path):
    (tmp_path / ".vllm-repo.toml").write_text('gpu = "L4"\nnum-gpus = 2\nvllm-version = "0.26.0"\n')
    assert resolve_settings(tmp_path).gpu_spec == "L4"
    assert resolve_settings(tmp_path, gpu="H100").gpu_spec == "H100"
    by_size = resolve_settings(tmp_path, gpu_memory_gib=40.0)
    assert by_size.gpu_spec == 40.0 and by_size.gpu is None  # one GPU flag replaces both GPU settings
    assert resolve_settings(tmp_path, num_gpus=8).num_gpus == 8
    assert resolve_settings(tmp_path).vllm_version == "0.26.0"
    with pytest.raises(UsageError, match="not both"):
        resolve_settings(tmp_path, gpu="H100", gpu_memory_gib=80.0)
