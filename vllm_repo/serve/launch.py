"""Running a launch: the server of a LaunchPlan (launch_plan.py) in its own process group, until Ctrl-C / SIGTERM.

- ``run_server`` starts the server (and the OpenAI gateway the plan asks for), waits for readiness with progress,
  reports the endpoints, follows the log for models that stop serving, and blocks until a signal; it always stops
  the whole group and removes its /dev/shm segments.
- ``server_failure`` turns a failed server's log into doctor's root cause and fix (vllm_repo.doctor).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from vllm_repo.serve.claims import hold_ports, release_ports
from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.launch_plan import LaunchPlan, gateway_command
from vllm_repo.serve.load_hang import HANG_HINT, LOAD_HANG_S, hang_message
from vllm_repo.serve.ports import PORT_OPTIONS
from vllm_repo.serve.processes import signal_group
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.shm_watch import SharedMemoryWatch

# ---------------------------------------------------------------------------------------------------------------------
# The server's log
# ---------------------------------------------------------------------------------------------------------------------

# The bundled backend's line when a model's engine dies; it names the cause it read from this same log.
_MODEL_DEAD = re.compile(
    r"\[vllm\] model (?P<name>\S+): the vLLM engine has died(?:: (?P<cause>[^;]*?) \(log: [^;]*\))?(?:;|$)", re.M
)


def engine_death_reason(log: str) -> str | None:
    """Why a running model's vLLM engine died, from the server log: doctor's reading of the process death."""
    from vllm_repo.doctor import ServerLog, diagnose

    deaths = [d for d in diagnose(ServerLog(log)).findings if d.code == "VD201"]
    return deaths[-1].message if deaths else None


def server_failure(server: TritonServer, what: str) -> LaunchError:
    """The error for a server that stopped or never became ready: doctor's root cause and fix, from its log."""
    from vllm_repo.doctor import ServerLog, diagnose, name_placeholders, root_error

    text = server.log_text()
    diagnosis = diagnose(ServerLog(text, server.log_path))
    name_placeholders(diagnosis)  # the model that failed, the GPU the log reports
    where = f"the whole log: {server.log_path}"
    if diagnosis.root is None:
        return LaunchError(
            f"{what}: {root_error(text) or 'no error line recognised; see the log'}",
            hint=where,
            log_path=server.log_path,
        )
    return LaunchError(
        f"{what}: {diagnosis.summary()}",
        hint=f"{diagnosis.root.hint}\n  {where} (`vllm-repo doctor {server.log_path}` reads it)",
        log_path=server.log_path,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------------------


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM/SIGHUP handler so that cleanup runs as for Ctrl-C."""


def server_for(
    plan: LaunchPlan, log_path: Path | None = None, extra_args: Sequence[str] = (), guard: bool = False
) -> TritonServer:
    """The server ``plan`` starts; ``extra_args``: more tritonserver options; ``guard``: the server has a guardian of
    its own (run_server's stops the server and the OpenAI gateway together)."""
    return TritonServer(
        plan.repository,
        serving_python=plan.python,
        triton_home=plan.server.home,
        host=plan.host,
        http_port=plan.http_port,
        grpc_port=plan.grpc_port,
        metrics_port=plan.metrics_port,
        env=plan.env,
        log_path=log_path,
        backend_source=plan.backend_source,
        backend_directory=plan.backend_directory,
        extra_args=[*plan.server_args, *extra_args],
        guard=guard,
    )


def openai_snippet(base_url: str, model: str, key_from_env: bool = False) -> str:
    """A program for the openai SDK that streams a chat answer from ``model``: what launch prints. With an API key
    the program reads it from VLLM_API_KEY rather than printing it."""
    key = "os.environ['VLLM_API_KEY']" if key_from_env else '"EMPTY"'
    return "\n".join(
        [
            "import os" if key_from_env else "",
            "from openai import OpenAI",
            f'client = OpenAI(base_url="{base_url}", api_key={key})',
            "stream = client.chat.completions.create(",
            f'    model="{model}",',
            '    messages=[{"role": "user", "content": "What is Triton?"}],',
            "    max_tokens=64,",
            "    stream=True,",
            ")",
            "for chunk in stream:",
            '    print(chunk.choices[0].delta.content or "" if chunk.choices else "", end="", flush=True)',
            "print()",
        ]
    ).lstrip("\n")


def endpoints_text(
    server: TritonServer, models: list[str], openai_url: str | None = None, api_key: bool = False
) -> str:
    model = models[0] if models else "MODEL"
    payload = json.dumps(
        {"text_input": "What is Triton?", "stream": True, "sampling_parameters": json.dumps({"max_tokens": 64})}
    )
    lines = [
        f"  HTTP     {server.http_url}   (health: {server.http_url}/v2/health/ready)",
        f"  gRPC     {server.grpc_url}",
        f"  metrics  {server.metrics_url}",
    ]
    if openai_url:
        lines.append(f"  OpenAI   {openai_url}   (models: {openai_url}/models)")
    lines += [
        f"  models   {', '.join(models) or '(none)'}",
        "",
        "Try it:",
        f"  vllm-repo infer {model} 'What is Triton?' --url {server.http_url}",
        f"  curl -sN -X POST {server.http_url}/v2/models/{model}/generate_stream \\",
        f"       -d '{payload}'",
    ]
    if openai_url:
        lines += [
            "",
            "With the openai SDK (pip install openai):",
            *("  " + line for line in openai_snippet(openai_url, model, key_from_env=api_key).splitlines()),
        ]
    return "\n".join([*lines, "", "Ctrl-C stops the server."])


def start_openai_gateway(plan: LaunchPlan) -> subprocess.Popen:
    """The OpenAI API as a child in a process group of its own (the server's group is in another session, which a
    process cannot join); launch stops it before the server, and the guardian with it. The backends write streamed
    answers to its stream socket."""
    command, env = gateway_command(plan)
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_openai_gateway(gateway: subprocess.Popen, timeout: float = 10.0, *, signalled: bool = False) -> None:
    """SIGTERM to its group (it closes its connections and exits; ``signalled``: sent already), SIGKILL to what is
    left after ``timeout``."""
    if not signalled:
        signal_group(gateway.pid, signal.SIGTERM)
    try:
        gateway.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    signal_group(gateway.pid, signal.SIGKILL)
    gateway.wait()


@dataclasses.dataclass
class _Running:
    """What run_server started, for the shutdown to stop: each is None until it is there."""

    server: TritonServer
    gateway: subprocess.Popen | None = None
    watch: SharedMemoryWatch | None = None
    guardian: Guardian | None = None
    ready: bool = False  # the server served: how it stops is reported

    def groups(self) -> list[int]:
        """The process groups serving: the server's and, with one, the gateway's (each leads its own)."""
        groups = [self.server.pgid] if self.server.pgid is not None else []
        return groups + ([self.gateway.pid] if self.gateway is not None else [])


def run_server(
    plan: LaunchPlan,
    *,
    out: TextIO | None = None,
    ready_timeout: float = 900.0,
    log_path: Path | None = None,
    on_ready: Callable[[TritonServer, list[int]], None] | None = None,
    stop_event: threading.Event | None = None,
    load_hang_s: float = LOAD_HANG_S,
) -> int:
    """Start the server, wait for it with progress, print the endpoints, and serve until Ctrl-C, SIGTERM, SIGHUP,
    ``stop_event``, or the server's own exit. Returns 0 after a requested stop; raises LaunchError (with the root error
    from the log) when the server fails to start or dies. A load seen hung ``load_hang_s`` after the backend said
    ready (load_hang.py) is stopped and started once more. ``on_ready`` is called, once ready, with the server and the
    ids of the process groups that serve (the server's, the gateway's). The process group and its shm segments are
    always gone when this returns."""
    out = out or sys.stderr
    # The log lives outside the server's work directory (removed at stop) so that it can still be read after a
    # failure; after a clean stop it is removed unless the caller chose where it goes.
    own_log: Path | None = None  # the log file launch made, and removes unless it tells something
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="vllm-repo-tritonserver-", suffix=".log")
        os.close(fd)
        log_path = own_log = Path(name)
    # The OpenAI port is held as the server holds its own (claims.py); ports picked for the plan are let go at the end.
    held = hold_ports({"OpenAI": plan.openai_port}, PORT_OPTIONS.__getitem__) if plan.openai_port is not None else []
    try:
        running = _Running(server_for(plan, log_path))
    except BaseException:
        release_ports([*held, *plan.picked_ports])
        raise
    previous = _install_stop_handlers()
    failed = True
    try:
        try:
            _start(running, plan, out, ready_timeout, load_hang_s, remove=[own_log] if own_log else [])
        except _LoadHung as hung:
            # Triton's, not the user's: only a restart ends it. Once; a second hang is reported.
            print(f"{hung.message}; starting Triton once more", file=out, flush=True)
            _shut_down(running, out)
            running = _Running(server_for(plan, log_path))
            _start(running, plan, out, ready_timeout, load_hang_s, remove=[own_log] if own_log else [])
        if on_ready:
            on_ready(running.server, running.groups())
        _serve(running, plan, out, stop_event)
        failed = False
        return 0
    except (KeyboardInterrupt, _Stop):
        failed = False
        return 0
    finally:
        # A second Ctrl-C or SIGTERM must not cut the cleanup short: stop() ends with SIGKILL on its own.
        _ignore_stop_signals(previous)
        try:
            clean = _shut_down(running, out)
            # Kept only when it can tell something: after a failure or a shutdown that was not clean, and if the
            # server wrote anything.
            if own_log is not None and ((not failed and clean) or not own_log.exists() or own_log.stat().st_size == 0):
                own_log.unlink(missing_ok=True)
        finally:
            release_ports([*held, *plan.picked_ports])
            _restore_handlers(previous)


def _start(
    running: _Running, plan: LaunchPlan, out: TextIO, ready_timeout: float, load_hang_s: float, remove: list[Path]
) -> None:
    """Start the server and the gateway under a guardian, wait until the server is ready, and print the endpoints.
    ``remove``: what the guardian removes besides the server's work directory, should launch be killed."""
    server = running.server
    try:
        server.start()
    except OSError as exc:  # the backend directory could not be laid out
        raise LaunchError(f"could not set up the server: {exc}") from exc
    # Should launch be killed, the guardian also removes what a normal stop would: the work directory, our log.
    python_env = Path(server.python_env) if server.python_env else None  # left only by a server killed first
    leftovers = [p for p in (server.work_directory, python_env, *remove) if p is not None]
    running.gateway = start_openai_gateway(plan) if plan.openai_port is not None else None
    also = [running.gateway.pid] if running.gateway is not None else []
    pgid = server.started.pid  # the leader of the server's own process group
    running.guardian = Guardian(pgid, server.shm_prefix, remove=leftovers, also=also)
    running.watch = watch = SharedMemoryWatch(pgid)
    began = time.monotonic()
    took = _wait_ready(server, plan, out, ready_timeout, watch, load_hang_s)
    running.ready = True
    openai_url = None
    if running.gateway is not None and plan.openai_port is not None:
        from vllm_repo.serve.openai.gateway import base_url

        openai_url = base_url(plan.host, plan.openai_port)
        # Ready means ready: the gateway reaches Triton and each model answers OpenAI requests.
        _wait_gateway(server, running.gateway, plan, openai_url, began + ready_timeout)
        took = time.monotonic() - began
    print(f"Triton is ready ({took:.0f} s):", file=out)
    print(endpoints_text(server, plan.models, openai_url, bool(plan.openai_api_keys)), file=out, flush=True)


def _serve(running: _Running, plan: LaunchPlan, out: TextIO, stop_event: threading.Event | None) -> None:
    """Until the server exits or ``stop_event`` is set: watch shared memory, the gateway, and the models that stop
    serving. Raises LaunchError when the server or the gateway stops by itself."""
    server, gateway, watch = running.server, running.gateway, running.watch
    assert watch is not None  # _start made it before the server was ready
    polled = 0.0
    serving = set(plan.models)
    followed = _LogFollower(server.log_path, offset=server.log_start)
    followed.new_text()  # what loading wrote: only what comes after it can be a death
    while server.is_running():
        if stop_event is not None and stop_event.is_set():
            return
        if gateway is not None and gateway.poll() is not None:
            raise LaunchError(
                f"the OpenAI API on port {plan.openai_port} stopped (status {gateway.returncode}); stopping Triton",
                hint="its error is above; `vllm-repo openai --triton-url ...` runs it alone against a server",
            )
        if time.monotonic() - polled > 2:
            watch.poll()
            _report_models_gone(server, serving, out, followed)
            polled = time.monotonic()
        time.sleep(0.25)
    raise server_failure(server, f"tritonserver exited by itself (status {server.started.returncode})")


def _shut_down(running: _Running, out: TextIO) -> bool:
    """Stop the gateway and the server's whole group, and remove the shared memory it left. The gateway is told first
    (it stops taking requests) and both stop side by side: one after the other, Ctrl-C took their sum. Returns whether
    the server's own shutdown was clean (it exited 0 without being signalled again), and says so when it was not."""
    server, watch = running.server, running.watch
    if running.gateway is not None:
        signal_group(running.gateway.pid, signal.SIGTERM)
    if server.process is None:
        if running.gateway is not None:
            stop_openai_gateway(running.gateway, signalled=True)
        server.stop()  # nothing ran; removes the work directory
        return True
    print("stopping Triton ...", file=out, flush=True)
    began = time.monotonic()
    if watch is None:
        status = server.stop(timeout=20)
        removed = []
    else:
        with watch.polling():
            status = server.stop(timeout=20)
        removed = watch.remove_leftovers()
    if running.gateway is not None:
        stop_openai_gateway(running.gateway, signalled=True)
    if running.guardian is not None:
        running.guardian.release()
    took = time.monotonic() - began
    clean = status == 0 and server.escalated_to is None
    if clean or not running.ready:  # a server that never served: its failure is reported as such
        print(f"stopped ({took:.1f} s).", file=out, flush=True)
    else:
        print(f"stopped ({took:.1f} s), not cleanly: {_unclean(server, status)}", file=out, flush=True)
    if removed:
        print(
            f"removed {len(removed)} shared-memory segment(s) the server left in /dev/shm: "
            f"{', '.join(sorted(removed))}",
            file=out,
            flush=True,
        )
    return clean


def _unclean(server: TritonServer, status: int | None) -> str:
    """Why a server's stop was not clean, in a few words, with the log's error line and where the log is."""
    from vllm_repo.doctor import root_error

    if server.escalated_to is not None:
        why = f"tritonserver did not stop by itself and its process group was sent {server.escalated_to}"
    elif status is not None and status < 0:
        name = signal.Signals(-status).name if -status in signal.valid_signals() else f"signal {-status}"
        why = f"tritonserver died of {name} while it shut down"
    else:
        why = f"tritonserver exited with status {status} while it shut down"
    text = server.log_text()
    aborted = re.findall(r"what\(\):\s*(.+)", text)  # a C++ exception that ended the server: its own words
    error = aborted[-1].strip() if aborted else root_error(text)
    return f"{why}{f' ({error})' if error else ''}; log: {server.log_path}"


class _LogFollower:
    """The text a log gained since the last call (a running server's log only grows), and the lines before it that a
    cause may be on."""

    def __init__(self, path: Path | None, keep: int = 400, offset: int = 0) -> None:
        self.path, self.offset, self.recent, self.keep = path, offset, "", keep

    def new_text(self) -> str:
        if self.path is None:
            return ""
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                raw = log.read()
        except OSError:
            return ""
        self.offset += len(raw)
        text = raw.decode("utf-8", "replace")
        self.recent = "\n".join((self.recent + text).splitlines()[-self.keep :])
        return text


def _report_models_gone(server: TritonServer, serving: set[str], out: TextIO, log: _LogFollower) -> None:
    """Say on launch's own console when a model stops serving, with the cause from the log, rather than look ready
    while every request to it fails: the backend logs the death of a model's engine (and, with its health check on,
    unloads the model)."""
    dead = {m["name"]: m["cause"] for m in _MODEL_DEAD.finditer(log.new_text())}
    for name in sorted(serving):
        if name not in dead and (server.model_ready(name) or not server.is_running()):
            continue
        serving.discard(name)
        why = dead.get(name) or engine_death_reason(log.recent) or "its vLLM engine stopped"
        print(
            f"model '{name}' is no longer serving: {why}; requests to it fail until launch is restarted\n"
            f"  log: {server.log_path}",
            file=out,
            flush=True,
        )


class _LoadHung(LaunchError):
    """Triton never finished a load the backend had finished (load_hang.py)."""


def _wait_ready(
    server: TritonServer,
    plan: LaunchPlan,
    out: TextIO,
    timeout: float,
    watch: SharedMemoryWatch,
    load_hang_s: float = LOAD_HANG_S,
) -> float:
    """Poll readiness, showing elapsed time; returns the seconds it took. A load seen hung (load_hang.py) is an error
    at once, not at ``timeout``."""
    start = time.monotonic()
    tty = hasattr(out, "isatty") and out.isatty()
    print(f"starting {plan.server.describe()}", file=out)
    print(f"  log: {server.log_path}", file=out, flush=True)
    last_report = 0.0
    hangs = server.load_hang_watch(load_hang_s)
    while True:
        elapsed = time.monotonic() - start
        if not server.is_running():
            status = server.started.returncode
            raise server_failure(server, f"tritonserver exited (status {status}) before it was ready")
        if server.is_ready():
            if tty:
                out.write("\r\033[K")
            return elapsed
        hung = hangs.hung() if hangs is not None else None
        if hung is not None:
            raise _LoadHung(
                f"{hang_message(hung)} (log line {hung.ready_line})",
                hint=f"{HANG_HINT}; the log: {server.log_path}",
                log_path=server.log_path,
            )
        if elapsed > timeout:
            raise LaunchError(
                f"tritonserver was not ready after {timeout:.0f} s",
                hint=f"see the log: {server.log_path}",
                log_path=server.log_path,
            )
        watch.poll()
        status = f"waiting for {', '.join(plan.models) or 'the server'} to load ... {elapsed:4.0f} s"
        if tty:
            out.write("\r\033[K" + status)
            out.flush()
        elif elapsed - last_report >= 10:
            print(status, file=out, flush=True)
            last_report = elapsed
        time.sleep(0.5)


def _wait_gateway(
    server: TritonServer, gateway: subprocess.Popen, plan: LaunchPlan, openai_url: str, deadline: float
) -> None:
    """Wait until the gateway's /health says 200: it reaches Triton, and every model that speaks OpenAI answers (its
    engine lives, vLLM's OpenAI layer is built). A server's own older vLLM backend speaks no OpenAI: there the gateway
    only has to answer."""
    health = openai_url.removesuffix("/v1") + "/health"
    bundled = plan.backend_directory is None
    while True:
        try:
            with urllib.request.urlopen(health, timeout=10) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if not bundled:
                return
            exc.close()
        except (urllib.error.URLError, OSError):
            pass
        if gateway.poll() is not None:
            raise LaunchError(
                f"the OpenAI API on port {plan.openai_port} stopped (status {gateway.returncode}) before it served",
                hint="its error is above",
            )
        if not server.is_running():
            raise server_failure(server, f"tritonserver exited (status {server.started.returncode})")
        if time.monotonic() > deadline:
            raise LaunchError(
                f"Triton is ready but the OpenAI API at {health} did not answer 200 in time",
                hint=f"see the server log: {server.log_path}",
                log_path=server.log_path,
            )
        time.sleep(0.1)


def _install_stop_handlers() -> dict:
    """SIGINT, SIGTERM and SIGHUP end launch (the finally block stops the server group). SIGINT gets a handler of its
    own too: a script that starts launch in the background (`launch ... &`) starts it with SIGINT ignored, and
    `kill -INT` must still stop it. Only possible in the main thread; elsewhere the caller owns signals."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def stop(signum, frame):
        raise _Stop(signal.Signals(signum).name)

    return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _ignore_stop_signals(previous: dict) -> None:
    for sig in previous:
        signal.signal(sig, signal.SIG_IGN)


def _restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
