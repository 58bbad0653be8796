"""End to end: `vllm-repo launch` starts the embedded Triton with vLLM on the CPU for a repository made by init,
`vllm-repo infer` streams from it, and Ctrl-C / SIGTERM leave no process and no /dev/shm segment behind.

Each server start costs 15-30 s on a small CPU machine, so one server is shared by the infer tests and the
start/stop cycles reuse few starts.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.serve.conftest import NEEDS_SERVING, SERVING_PYTHON, vllm_repo_cli
from vllm_repo.scaffold import init_model
from vllm_repo.serve.errors import InferError
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.infer import infer
from vllm_repo.serve.ports import free_port, free_ports
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.server import PYTHON_ENV_DIRS

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]

READY_TIMEOUT = 300
DEV_SHM = Path("/dev/shm")
UUID_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def shm_names() -> set[str]:
    return {p.name for p in DEV_SHM.iterdir()} if DEV_SHM.is_dir() else set()


def ipc_sockets() -> set[str]:
    """vLLM's ZMQ IPC sockets (files named by a UUID) directly in the temporary directory."""
    tmp = Path(tempfile.gettempdir())
    return {p.name for p in tmp.iterdir() if UUID_NAME.fullmatch(p.name) and p.is_socket()}


def bound_socket_paths() -> set[str]:
    """Paths of the Unix sockets some live process has bound (/proc/net/unix): another vLLM serving on this machine
    keeps its IPC sockets there, a socket a dead server left behind is bound by nobody."""
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            paths.add(fields[7])
    return paths


def orphaned_ipc_sockets(before: set[str]) -> set[str]:
    """IPC sockets created since ``before`` that no live process has bound: what a stopped server left."""
    tmp = Path(tempfile.gettempdir())
    deadline = time.monotonic() + 10
    while True:  # another server shutting down removes its own in a moment
        bound = bound_socket_paths()
        left = {name for name in ipc_sockets() - before if str(tmp / name) not in bound}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def shm_in_use() -> set[str]:
    """/dev/shm entries some live process has mapped (POSIX shared memory, semaphores) or open. Matched by inode:
    a semaphore is mapped under the temporary name it was created with, then linked to its real name."""
    inodes: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "maps").read_text().splitlines():
                fields = line.split()
                if len(fields) >= 6 and fields[5].startswith("/dev/shm/"):
                    inodes.add(int(fields[4]))
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd).startswith("/dev/shm/"):
                    inodes.add(os.stat(fd).st_ino)
        except OSError:
            continue
    used = set()
    for entry in DEV_SHM.iterdir():
        try:
            if entry.stat().st_ino in inodes:
                used.add(entry.name)
        except OSError:
            continue
    return used


@dataclasses.dataclass
class Launched:
    """A `vllm-repo launch` process (its own session) and what it printed."""

    proc: subprocess.Popen
    url: str
    ports: tuple[int, int, int]
    lines: list[str]
    shm_before: set[str]
    ipc_before: set[str] = dataclasses.field(default_factory=ipc_sockets)
    python_envs_before: set[str] = dataclasses.field(default_factory=lambda: set(glob.glob(PYTHON_ENV_DIRS)))
    server_pid: int | None = None
    # Stops launch's group (launch then stops its server) should this test process die first.
    guardian: Guardian | None = None

    def release_guardian(self) -> None:
        if self.guardian is not None and self.proc.poll() is not None:
            self.guardian.release()
            self.guardian = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def shm_prefix(self) -> str:
        # processes.unique_shm_prefix(): one per server, starting with the launching process's pid.
        return f"vllm_repo_{self.proc.pid}_"

    def send(self, sig: int) -> None:
        # Ctrl-C in a terminal signals the foreground process group: launch's own group here.
        os.killpg(self.proc.pid, sig)

    def wait_exit(self, timeout: float) -> tuple[int, float]:
        began = time.monotonic()
        code = self.proc.wait(timeout=timeout)
        self.release_guardian()
        return code, time.monotonic() - began

    def kill_everything(self) -> None:
        """Safety net only: the tests assert that nothing is left; this makes sure of it whatever happened."""
        for pgid in (self.proc.pid, self.server_pid):
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.release_guardian()


def _children(pid: int) -> list[tuple[int, str]]:
    from vllm_repo.serve.processes import process_table

    return [(child, comm) for child, comm, fields in process_table() if int(fields[1]) == pid]


def start_launch(repo: Path, *extra: str, wait_ready: bool = True, env: dict | None = None) -> Launched:
    # Distinct, and none a port the caller picked for the command (--openai-port).
    given = [int(value) for flag, value in itertools.pairwise(extra) if flag.endswith("-port")]
    ports = tuple(free_ports(3, avoid=given))
    cmd = vllm_repo_cli(
        "launch",
        str(repo),
        "--http-port",
        str(ports[0]),
        "--grpc-port",
        str(ports[1]),
        "--metrics-port",
        str(ports[2]),
        "--python",
        SERVING_PYTHON,
        *extra,
    )
    launched = Launched(
        proc=subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        ),
        url=f"http://127.0.0.1:{ports[0]}",
        ports=ports,
        lines=[],
        shm_before=shm_names(),
    )
    launched.guardian = Guardian(launched.proc.pid, None, grace_s=30)  # launch removes its server's regions
    reader = threading.Thread(
        target=lambda: launched.lines.extend(iter(launched.proc.stdout.readline, "")), daemon=True
    )
    reader.start()
    if not wait_ready:
        # Note the server's pid while it lives, to check its process group once it is gone.
        def watch():
            while launched.proc.poll() is None and launched.server_pid is None:
                servers = [pid for pid, comm in _children(launched.proc.pid) if comm == "tritonserver"]
                launched.server_pid = servers[0] if servers else None
                time.sleep(0.1)

        threading.Thread(target=watch, daemon=True).start()
        return launched
    deadline = time.monotonic() + READY_TIMEOUT
    while "Triton is ready" not in launched.output:
        if launched.proc.poll() is not None:
            reader.join(5)
            pytest.fail(f"launch exited with {launched.proc.returncode}:\n{launched.output}")
        if time.monotonic() > deadline:
            launched.kill_everything()
            pytest.fail(f"not ready after {READY_TIMEOUT} s:\n{launched.output}")
        time.sleep(0.25)
    servers = [pid for pid, comm in _children(launched.proc.pid) if comm == "tritonserver"]
    assert len(servers) == 1, _children(launched.proc.pid)
    launched.server_pid = servers[0]
    return launched


def assert_nothing_left(launched: Launched) -> None:
    assert launched.server_pid is not None
    # The server was its own process group's leader: the stub, vLLM's EngineCore and everything else they started
    # belonged to that group.
    assert process_group_members(launched.server_pid) == []
    # Ours by name (Triton's regions), or by being orphaned: a segment created meanwhile that no live process has
    # mapped or open (other servers may run on this machine; their segments are in use).
    # Another server on the machine that is shutting down has unmapped segments its resource tracker is about to
    # remove: only what stays orphaned counts.
    deadline = time.monotonic() + 10
    while True:
        new = shm_names() - launched.shm_before
        left = {name for name in new if name.startswith(launched.shm_prefix)} | (new - shm_in_use())
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == set(), f"/dev/shm segments left behind: {sorted(left)}"
    # vLLM's sockets go in the server's work directory, not the temporary directory, where a killed engine left them.
    # Only the orphaned ones count: other vLLMs on this machine (a CI runner's, the tests' reference) keep theirs.
    assert orphaned_ipc_sockets(launched.ipc_before) == set()
    # Triton's Python backend makes a /tmp/python_env_* directory per server and leaves it: the server's own go.
    assert set(glob.glob(PYTHON_ENV_DIRS)) - launched.python_envs_before == set()
    for port in launched.ports:  # nothing listens there any more
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))


def stop_and_check(launched: Launched, *more_ports: int) -> None:
    """SIGTERM, as a service manager stops launch: it exits 0 and leaves nothing, ``more_ports`` closed too."""
    launched.send(signal.SIGTERM)
    try:
        code, _ = launched.wait_exit(60)
        assert code == 0, launched.output
        launched.ports = (*launched.ports, *more_ports)
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


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


def engine_core_pid(server_pgid: int) -> int:
    """vLLM's EngineCore process in the Triton server's process group (found by its process title, in that group)."""
    return next(
        pid
        for pid in process_group_members(server_pgid)
        if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore")
    )


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
