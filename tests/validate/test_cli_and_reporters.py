"""The validate command as users and CI call it: exit codes, formats, the release it says it used."""

import json
import subprocess
import sys


def vllm_repo(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "vllm_repo", *args], capture_output=True, text=True, cwd=cwd)


def test_exit_codes_and_json_shape(repo):
    repo.model("good")
    ok = vllm_repo("validate", "--vllm-version", "0.32.0", "--format", "json", str(repo.root))
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    assert payload["diagnostics"] == [] and payload["summary"]["vllm_version"] == "0.32.0"

    repo.model("bad", engine_args={"model": "m", "dtype": "bf16", "gpu_memory_utilization": 0.4})
    bad = vllm_repo("validate", "--vllm-version", "0.32.0", "--format", "json", str(repo.root))
    assert bad.returncode == 1
    (d,) = json.loads(bad.stdout)["diagnostics"]
    assert set(d) == {"code", "severity", "file", "line", "column", "message", "hint", "fix"}
    assert d["code"] == "VR304" and d["line"] >= 1 and d["column"] >= 1


def test_usage_errors_exit_2_without_traceback(tmp_path):
    missing = vllm_repo("validate", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope" in missing.stderr
    bad_version = vllm_repo("validate", "--vllm-version", "banana", str(tmp_path))
    assert bad_version.returncode == 2 and "banana" in bad_version.stderr
    (tmp_path / "empty").mkdir()
    empty = vllm_repo("validate", str(tmp_path / "empty"))
    assert empty.returncode == 2 and "no model directories" in empty.stderr


def test_text_output_names_file_line_and_release(repo):
    repo.model("llm", engine_args='{\n  "model": "m",\n  "dtype": "bf16"\n}')
    result = vllm_repo("validate", "--vllm-version", "0.32.0", str(repo.root))
    assert result.returncode == 1
    assert "llm/1/model.json:3:3: error[VR304]" in result.stdout
    assert "hint: did you mean" in result.stdout
    assert "vLLM 0.32.0" in result.stderr


def test_github_annotations(repo):
    repo.model("llm", engine_args='{\n  "model": "m",\n  "trust_remote_code": true\n}')
    result = vllm_repo("validate", "--vllm-version", "0.32.0", "--format", "github", str(repo.root))
    line = result.stdout.strip().splitlines()[0]
    assert line.startswith("::warning file=") and ",line=3,col=3," in line and "title=vllm-repo VR307" in line
    assert result.returncode == 0


def test_newer_unbundled_release_maps_to_nearest_schema(repo):
    repo.model("llm")
    result = vllm_repo("validate", "--vllm-version", "99.0.0", "--format", "json", str(repo.root))
    summary = json.loads(result.stdout)["summary"]
    assert "99.0.0" in summary["vllm_version_reason"] and summary["vllm_version"] != "99.0.0"


def test_validate_does_not_import_vllm_or_torch(repo):
    repo.model("llm")
    code = (
        f"import sys; from vllm_repo.cli import main; sys.argv=['vllm-repo','validate',{str(repo.root)!r}];\n"
        "try: main()\nexcept SystemExit: pass\n"
        "heavy=[m for m in ('vllm','torch','transformers','grpc','tritonclient.grpc') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr


def test_num_gpus_option_enables_the_placement_checks(repo):
    config = 'backend: "vllm"\ninstance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]\n'
    repo.model("llm", config=config)
    args = ("validate", "--vllm-version", "0.32.0", "--format", "json", str(repo.root))
    assert vllm_repo(*args).returncode == 0
    beyond = vllm_repo(*args, "--num-gpus", "2")
    assert beyond.returncode == 1 and [d["code"] for d in json.loads(beyond.stdout)["diagnostics"]] == ["VR506"]
