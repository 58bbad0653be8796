"""[tool.vllm-repo] / .vllm-repo.toml settings and the GPU catalog."""

from __future__ import annotations

import pytest

from vllm_repo.estimate.gpus import UnknownGpuError, find_gpu, resolve_gpu
from vllm_repo.settings import SettingsError, find_settings_file, load_settings


def test_pyproject_table_found_from_a_nested_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname="x"\n\n[tool.vllm-repo]\ngpu = "H100 80GB"\nnum-gpus = 2\n'
    )
    nested = tmp_path / "model_repository" / "llama" / "1"
    nested.mkdir(parents=True)
    s = load_settings(nested)
    assert s.gpu == "H100 80GB" and s.num_gpus == 2 and s.gpu_spec == "H100 80GB"
    assert s.source == str(tmp_path / "pyproject.toml")


def test_pyproject_without_the_table_is_skipped(tmp_path):
    (tmp_path / ".vllm-repo.toml").write_text("gpu-memory-gib = 47.5\n")
    inner = tmp_path / "svc"
    inner.mkdir()
    (inner / "pyproject.toml").write_text('[project]\nname = "svc"\n')
    assert load_settings(inner).gpu_spec == 47.5


def test_dot_file_wins_over_pyproject_in_the_same_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.vllm-repo]\ngpu = "L4"\n')
    (tmp_path / ".vllm-repo.toml").write_text('gpu = "L40S"\n')
    assert load_settings(tmp_path).gpu == "L40S"


def test_unknown_key_and_bad_toml_name_the_file(tmp_path):
    (tmp_path / ".vllm-repo.toml").write_text('gpus = "L4"\n')
    with pytest.raises(SettingsError, match=r"\.vllm-repo\.toml: gpus"):
        load_settings(tmp_path)
    (tmp_path / ".vllm-repo.toml").write_text("gpu = \n")
    with pytest.raises(SettingsError, match="invalid TOML"):
        load_settings(tmp_path)
    (tmp_path / ".vllm-repo.toml").write_text('gpu = "L4"\ngpu-memory-gib = 20\n')
    with pytest.raises(SettingsError, match="either gpu or gpu-memory-gib"):
        load_settings(tmp_path)


def test_no_settings_anywhere(tmp_path):
    assert find_settings_file(tmp_path) is None
    assert load_settings(tmp_path).gpu_spec is None and load_settings(tmp_path).source is None


@pytest.mark.parametrize(
    "name,expected",
    [
        ("H100", "H100 80GB"),
        ("nvidia-h100-80gb-hbm3", "H100 80GB"),
        ("A100-40GB", "A100 40GB"),
        ("a100 80 GB", "A100 80GB"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("l40s", "L40S"),
        ("MI300X", "MI300X"),
        ("rtx 6000 ada", "RTX 6000 Ada"),
    ],
)
def test_gpu_names_as_people_write_them(name, expected):
    assert find_gpu(name).name == expected


def test_unknown_gpu_suggests_close_names():
    with pytest.raises(UnknownGpuError, match=r"Did you mean .*'H100 80GB'"):
        find_gpu("H10")


def test_numeric_gpu_is_a_custom_size():
    assert resolve_gpu("24").total_gib == 24 and resolve_gpu(47.5).total_gib == 47.5
    with pytest.raises(UnknownGpuError, match="positive"):
        resolve_gpu(-1.0)
