"""End to end: `vllm-repo launch` starts the embedded Triton with vLLM on the CPU for a repository made by init,
`vllm-repo infer` streams from it, and Ctrl-C / SIGTERM leave no process and no /dev/shm segment behind.

Each server start costs 15-30 s on a small CPU machine, so one server is shared by the infer tests and the
start/stop cycles reuse few starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.launch import (
    READY_TIMEOUT,
    assert_nothing_left,
    engine_core_pid,
    start_launch,
)
from tests.support.serving import NEEDS_SERVING, vllm_repo_cli
from vllm_repo.scaffold import init_model
from vllm_repo.serve.errors import InferError
from vllm_repo.serve.infer import infer
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.processes import process_group_members

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(tiny_repository):
    launched = start_launch(tiny_repository)
    yield launched
    launched.send(signal.SIGTERM)
    try:
        launched.wait_exit(60)
    finally:
        launched.kill_everything()


def test_launch_prints_endpoints_and_a_working_curl_example(server):
    out = server.output
    assert f"HTTP     {server.url}" in out
    assert f"127.0.0.1:{server.ports[1]}" in out and f"127.0.0.1:{server.ports[2]}/metrics" in out
    curl = next(line for line in out.splitlines() if line.strip().startswith("curl "))
    body_line = out.splitlines()[out.splitlines().index(curl) + 1]
    body = body_line.strip().removeprefix("-d '").removesuffix("'")
    request = json.loads(body)
    assert request["text_input"] and json.loads(request["sampling_parameters"])["max_tokens"] > 16
    # The printed example really works: run it as printed.
    command = curl.strip().removesuffix("\\").strip() + " " + body_line.strip()
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.count("data: ") >= 2, done.stdout + done.stderr


def test_infer_streams_text_as_it_arrives(server):
    pieces: list[str] = []
    completion = infer(
        "tiny",
        "Triton Inference Server serves",
        url=server.url,
        max_tokens=32,
        params={"ignore_eos": True},
        on_text=pieces.append,
    )
    assert len(pieces) >= 2 and "".join(pieces) == completion.text
    assert completion.num_output_tokens == 32
    assert completion.finish_reason == "length"
    assert completion.num_input_tokens and completion.num_input_tokens > 1


def test_infer_default_max_tokens_is_not_vllms_16(server):
    completion = infer("tiny", "Hello", url=server.url, params={"ignore_eos": True})
    assert completion.num_output_tokens == 256


def test_infer_no_stream_gives_one_response(server):
    completion = infer("tiny", "Hello", url=server.url, max_tokens=20, stream=False, params={"ignore_eos": True})
    assert completion.responses == 1
    assert completion.num_output_tokens == 20 and completion.text


def test_infer_cli_streams_and_shows_outputs(server):
    request = ["infer", "tiny", "The quick brown fox", "--url", server.url, "--max-tokens", "12"]
    request += ["--param", "ignore_eos=true", "--param", "temperature=0"]
    done = subprocess.run(
        vllm_repo_cli(*request, "--show-outputs"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "finish_reason=length" in done.stderr and "output_tokens=12" in done.stderr
    # temperature 0 is deterministic: the same request gives the same text.
    again = subprocess.run(
        vllm_repo_cli(*request),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.stdout == done.stdout


def test_engine_metrics_are_on_the_metrics_port(server):
    """init enables REPORT_CUSTOM_METRICS (and keeps vLLM's stats on): vllm:* series appear after a request."""
    import urllib.request

    infer("tiny", "Count", url=server.url, max_tokens=8, params={"ignore_eos": True})
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.ports[2]}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        series = {line.split("{")[0] for line in text.splitlines() if line.startswith("vllm:")}
        if any("generation_tokens" in s for s in series) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert any("generation_tokens" in s for s in series), sorted(series)
    assert 'model="tiny"' in text


def test_infer_unknown_model_and_no_server_are_clear_errors(server):
    with pytest.raises(InferError, match="no model 'nope'") as unknown:
        infer("nope", "Hello", url=server.url)
    assert unknown.value.hint == "its models: tiny"  # what the server does serve
    with pytest.raises(InferError, match="no model 'nope'"):
        infer("nope", "Hello", url=server.url, wait=30)  # a running server that lacks it: no point waiting
    done = subprocess.run(
        vllm_repo_cli("infer", "tiny", "Hello", "--url", f"http://127.0.0.1:{free_port()}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "no Triton server answers" in done.stderr and "Traceback" not in done.stderr
    assert "--wait" in done.stderr and not done.stdout  # the hint says how to wait; no stray blank line
    waited = subprocess.run(
        vllm_repo_cli("infer", "tiny", "Hello", "--url", f"http://127.0.0.1:{free_port()}", "--wait", "2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert waited.returncode == 1 and "after waiting 2 s" in waited.stderr and "waiting up to 2 s" in waited.stderr


def test_a_refused_request_shows_the_servers_words_without_sse_framing(server):
    for stream in (True, False):
        with pytest.raises(InferError) as refused:
            infer("tiny", "Hello", url=server.url, stream=stream, params={"temprature": 0.5})
        assert "did you mean" in refused.value.message and "data:" not in refused.value.message


def test_infer_wait_goes_ahead_once_the_model_is_ready(server):
    done = subprocess.run(
        vllm_repo_cli("infer", "tiny", "Hello", "--url", server.url, "--wait", "60", "--max-tokens", "4"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


def test_doctor_finds_the_launched_server_healthy_after_everything_above(server):
    """Streamed and complete answers, a request for an unknown model, a refused request: a server that served them
    is healthy, and doctor --url says so (exit 0) instead of reading a client's error or a warning as a fault."""
    done = subprocess.run(vllm_repo_cli("doctor", "--url", server.url), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[VD" not in done.stdout, done.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_start_stop_cycles_leave_nothing_behind(tiny_repository, sig):
    launched = start_launch(tiny_repository)
    try:
        assert infer("tiny", "Hi", url=launched.url, max_tokens=4).text is not None
        launched.send(sig)
        code, took = launched.wait_exit(60)
        assert code == 0, launched.output
        assert took < 20, f"stopping took {took:.1f} s"
        assert "stopped" in launched.output
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def test_the_engine_process_shape_stops_with_its_own_process_group_and_leaves_nothing(tiny_model, tmp_path):
    """ENGINE_PROCESS (the shape a GPU instance gets by default) runs vLLM in a process that leads a process group of
    its own, below the server's: launch's stop waits for that group too, and removes what its processes left in
    /dev/shm (vLLM's EngineCore leaves semaphores there)."""
    repo = tmp_path / "model_repository"
    init_model(repo, str(tiny_model), name="tiny", max_model_len=512)
    config = repo / "tiny" / "config.pbtxt"
    config.write_text(config.read_text() + 'parameters { key: "ENGINE_PROCESS" value: { string_value: "true" } }\n')
    launched = start_launch(repo)
    try:
        assert infer("tiny", "Hi", url=launched.url, max_tokens=4).text is not None
        leaders = {group: _command(group) for group in launched.descendants.groups - {launched.server_pid}}
        engines = [group for group, command in leaders.items() if "vllm_repo_backend.engine_process" in command]
        assert len(engines) == 1 and process_group_members(engines[0]), leaders
        launched.send(signal.SIGTERM)
        code, _ = launched.wait_exit(60)
        assert code == 0, launched.output
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_model_vllm_refuses_fails_with_vllms_own_reason(tiny_model, tmp_path):
    """The KV cache cannot hold one max_model_len sequence: vLLM's EngineCore refuses, and launch reports that
    reason (not "Engine core initialization failed") and exits non-zero, leaving nothing behind."""
    repo = tmp_path / "model_repository"
    init_model(
        repo,
        str(tiny_model),
        name="tiny",
        max_model_len=512,
        settings={"kv_cache_memory_bytes": 4096},
    )
    launched = start_launch(repo, wait_ready=False)
    try:
        code, _ = launched.wait_exit(READY_TIMEOUT)
        time.sleep(0.5)
        assert code == 1
        error = next(line for line in launched.output.splitlines() if line.startswith("error:"))
        assert "model 'tiny' failed to load" in error
        assert "See root cause above" not in error and "initialization failed" not in error
        assert "cache" in error.lower(), error
        # The whole log is kept for the user, where the hint says.
        log = Path(launched.output.split("the whole log: ", 1)[1].split()[0])
        assert "failed to load 'tiny'" in log.read_text()
        # launch and doctor read the failure alike: the same cause, its code, and the fix.
        from vllm_repo.doctor import diagnose_file

        root = diagnose_file(log).root
        assert root is not None and f"[{root.code}]" in error and root.message in error, error
        assert root.hint.split(";")[0] in launched.output
        log.unlink()
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def test_sigterm_while_the_model_is_still_loading_stops_everything(tiny_repository):
    launched = start_launch(tiny_repository, wait_ready=False)
    try:
        deadline = time.monotonic() + 60
        while launched.server_pid is None or ("waiting for" not in launched.output and time.monotonic() < deadline):
            assert launched.proc.poll() is None, launched.output
            time.sleep(0.2)
        time.sleep(3)  # the stub is importing vLLM / starting the engine now
        assert "Triton is ready" not in launched.output
        launched.send(signal.SIGTERM)
        code, took = launched.wait_exit(60)
        assert code == 0, launched.output
        assert took < 20, f"stopping took {took:.1f} s"
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def test_launch_says_on_its_console_when_a_model_stops_serving(tiny_repository):
    launched = start_launch(tiny_repository)
    try:
        os.kill(engine_core_pid(launched.server_pid), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "is no longer serving" not in launched.output and time.monotonic() < deadline:
            time.sleep(0.5)
        report = launched.output[launched.output.index("model 'tiny' is no longer serving") :]
        first = report.splitlines()[0]
        assert "unexpectedly" in first and "engine core" in first and "log:" in report, report  # vLLM's own cause
        # infer (and any HTTP client) gets the same cause, and where the log is.
        url = f"http://127.0.0.1:{launched.ports[0]}"
        infer = subprocess.run(vllm_repo_cli("infer", "tiny", "Hello", "--url", url), capture_output=True, text=True)
        assert infer.returncode == 1 and "engine core" in infer.stderr and "log: " in infer.stderr, infer.stderr
        assert launched.proc.poll() is None  # still serving the repository's other endpoints until stopped
        launched.send(signal.SIGINT)
        launched.proc.wait(60)
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def test_a_killed_launch_does_not_orphan_the_server(tiny_repository):
    """SIGKILL runs no handler in launch: its guardian process stops the server group instead."""
    workdirs_before = set(Path(tempfile.gettempdir()).glob("vllm-repo-triton-*"))
    launched = start_launch(tiny_repository)
    log = Path(next(line.split("log:", 1)[1].strip() for line in launched.lines if line.strip().startswith("log:")))
    assert log.exists()
    try:
        os.kill(launched.proc.pid, signal.SIGKILL)  # launch alone, not its group
        launched.proc.wait(10)
        deadline = time.monotonic() + 40
        while process_group_members(launched.server_pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert_nothing_left(launched)
        # Nor the files a normal stop removes: the server's work directory and launch's log.
        deadline = time.monotonic() + 20
        while (log.exists() or set(Path(tempfile.gettempdir()).glob("vllm-repo-triton-*")) - workdirs_before) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.5)
        assert not log.exists()
        assert set(Path(tempfile.gettempdir()).glob("vllm-repo-triton-*")) - workdirs_before == set()
    finally:
        launched.kill_everything()


def test_a_log_file_given_to_launch_is_appended_to_and_kept(tiny_repository, tmp_path):
    log = tmp_path / "logs" / "tritonserver.log"
    log.parent.mkdir()
    earlier = "a line an earlier run left\n"
    log.write_text(earlier)
    launched = start_launch(tiny_repository, "--log-file", str(log))
    try:
        assert f"log: {log}" in launched.output
        assert infer("tiny", "Hi", url=launched.url, max_tokens=4).text is not None
        launched.send(signal.SIGTERM)
        code, _ = launched.wait_exit(60)
        assert code == 0, launched.output
        assert "stopped" in launched.output
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()
    # Kept after a clean stop, and appended to: the earlier run's lines first, then this server's.
    text = log.read_text()
    assert text.startswith(earlier)
    assert "[vllm] model tiny ready" in text[len(earlier) :]
