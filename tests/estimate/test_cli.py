"""`vllm-repo estimate` end to end, as a user runs it (subprocess, the real console entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.estimate_models import REPO, config, model_dir

JSON_KEYS = {
    "weights_gib",
    "activation_gib",
    "cudagraph_gib",
    "non_torch_gib",
    "kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "fits",
    "recommendations",
}


def cli(*args: str, cwd=None, env_extra=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "vllm_repo", "estimate", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=env,
        timeout=60,
    )


@pytest.fixture
def llama_dir(tmp_path):
    return model_dir(tmp_path, config("llama-3.1-8b"), weights=False, name="Llama-3.1-8B")


def test_json_output(llama_dir):
    r = cli(str(llama_dir), "--gpu", "H100 80GB", "--max-model-len", "8192", "--vllm-version", "0.26.0", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= JSON_KEYS
    assert doc["fits"] is True and doc["kv_cache_tokens"] > 400_000
    assert doc["weights_gib"] == pytest.approx(14.99, abs=0.02)
    assert doc["kv_bytes_per_token"] == 131072


def test_the_table_says_max_num_seqs_caps_concurrency_and_never_prints_a_negative_kv_cache(llama_dir):
    r = cli(str(llama_dir), "--gpu", "H200", "--max-model-len", "16", "--vllm-version", "0.26.0")
    assert r.returncode == 0, r.stderr
    figure = float(r.stdout.split("maximum concurrency at 16 tokens: ")[1].split("x")[0])
    seqs = int(r.stdout.split("max_num_seqs ")[1].split()[0].rstrip(","))
    assert figure > seqs  # short requests: the cache holds far more than the scheduler runs
    assert f"max_num_seqs {seqs} caps the requests running at once" in r.stdout
    roomy = cli(str(llama_dir), "--gpu", "H200", "--max-model-len", "131072", "--vllm-version", "0.26.0")
    assert "caps the requests" not in roomy.stdout
    short = cli(str(llama_dir), "--gpu", "L4", "--gpu-memory-utilization", "0.2", "--vllm-version", "0.26.0")
    assert short.returncode == 1
    kv_line = next(line for line in short.stdout.splitlines() if "= KV cache" in line)
    assert "none: the terms above exceed it by" in kv_line and "-" not in kv_line


def test_table_and_exit_1_when_vllm_would_not_start(llama_dir):
    r = cli(str(llama_dir), "--gpu", "L4", "--vllm-version", "0.26.0")
    assert r.returncode == 1
    assert "fits: NO" in r.stdout and "max seq len (131072)" in r.stdout
    assert "Recommendations:" in r.stdout and "max_model_len = " in r.stdout
    assert "Traceback" not in r.stderr


def test_options_change_the_estimate(llama_dir):
    base = json.loads(cli(str(llama_dir), "--gpu", "A100 80GB", "--max-model-len", "8192", "--json").stdout)
    fp8 = json.loads(
        cli(str(llama_dir), "--gpu", "A100 80GB", "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--json").stdout
    )
    tp2 = json.loads(cli(str(llama_dir), "--gpu", "A100 80GB", "--max-model-len", "8192", "--tp", "2", "--json").stdout)
    eager = json.loads(
        cli(
            str(llama_dir),
            "--gpu",
            "A100 80GB",
            "--max-model-len",
            "8192",
            "--enforce-eager",
            "--vllm-version",
            "0.24.0",
            "--json",
        ).stdout
    )
    assert fp8["kv_bytes_per_token"] * 2 == base["kv_bytes_per_token"]
    assert tp2["weights_gib"] < base["weights_gib"] / 1.9 and tp2["tensor_parallel_size"] == 2
    assert eager["cudagraph_capture_gib"] == 0 and eager["gpu_memory_utilization"] == 0.92
    custom = json.loads(cli(str(llama_dir), "--gpu-memory-gib", "40", "--max-model-len", "8192", "--json").stdout)
    assert custom["gpu_total_gib"] == 40


def test_triton_model_directory_supplies_the_settings(tmp_path, llama_dir):
    version = tmp_path / "model_repository" / "llama" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(
        json.dumps(
            {"model": str(llama_dir), "max_model_len": 4096, "gpu_memory_utilization": 0.5, "enforce_eager": True}
        )
    )
    (tmp_path / "pyproject.toml").write_text('[tool.vllm-repo]\ngpu = "L40S"\n')
    r = cli(str(version.parent), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["max_model_len"], doc["gpu_memory_utilization"], doc["enforce_eager"]) == (4096, 0.5, True)
    assert doc["gpu"] == "L40S" and doc["model_json"].endswith("1/model.json")
    # a flag overrides model.json
    doc = json.loads(cli(str(version.parent), "--json", "--max-model-len", "2048", cwd=tmp_path).stdout)
    assert doc["max_model_len"] == 2048
    # The table says where the settings came from, and does not call them defaults.
    table = cli(str(version.parent), cwd=tmp_path)
    assert "settings from" in table.stdout and "model.json" in table.stdout
    header = table.stdout.splitlines()[1]
    assert "engine defaults" not in header and "batch defaults of the engine usage context" in header


@pytest.mark.parametrize(
    "args,message",
    [
        (["--gpu", "H1000"], "unknown GPU 'H1000'"),
        ([], "which GPU?"),
        (["--gpu", "L4", "--tp", "3"], "must be divisible by tensor parallel size (3)"),
        (["--gpu", "L4", "--dtype", "fp4"], "dtype 'fp4'"),
        (["--gpu", "L4", "--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
        (["--gpu", "L4", "--usage-context", "batch"], "usage context must be one of"),
        (["--gpu", "L4", "--vllm-version", "newest"], "not a vLLM version"),
    ],
)
def test_bad_input_is_a_clear_error(llama_dir, args, message):
    r = cli(str(llama_dir), *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_model_and_uncached_repo(tmp_path):
    r = cli(str(tmp_path / "nope"), "--gpu", "L4")
    assert r.returncode == 2 and "no such directory" in r.stderr
    r = cli("some-org/some-model", "--gpu", "L4", env_extra={"HF_HUB_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 2 and "not in the local Hugging Face cache" in r.stderr and "Traceback" not in r.stderr


def test_misplaced_model_json_is_explained(tmp_path):
    d = tmp_path / "llama"
    d.mkdir()
    (d / "model.json").write_text("{}")
    r = cli(str(d), "--gpu", "L4")
    assert r.returncode == 2 and "version directory" in r.stderr


def test_estimate_imports_neither_vllm_nor_torch():
    code = (
        "import sys, vllm_repo.estimate, vllm_repo.cli.estimate, vllm_repo.settings;"
        "bad = [m for m in ('torch', 'vllm') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_gpus_lists_the_catalog():
    r = subprocess.run([sys.executable, "-m", "vllm_repo", "gpus"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert any(line.startswith("H200") and "139.80 GiB" in line for line in lines)
    assert any(line.startswith("L4 ") and "approximate" in line for line in lines)
    amd = [line for line in lines if line.startswith("MI300X")]
    assert amd and "nvidia-smi" not in amd[0].split(";")[0]  # the label is the vendor's, the source says which tool


def test_out_of_range_number_in_model_json_is_a_clear_error(tmp_path, llama_dir):
    version = tmp_path / "model_repository" / "llama" / "1"
    version.mkdir(parents=True)
    (version / "model.json").write_text(f'{{"model": "{llama_dir}", "gpu_memory_utilization": 1{"0" * 400}}}')
    r = cli(str(version.parent), "--gpu", "H200")
    assert r.returncode == 2 and "out of range" in r.stderr and "Traceback" not in r.stderr
