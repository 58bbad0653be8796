"""launch's shutdown: the OpenAI gateway and Triton stop side by side, so Ctrl-C takes the longer of the two, not their
sum."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from vllm_repo.serve import launch


class SlowServer:
    """A server whose stop takes a while, recording whether the gateway was running as its stop began and ended."""

    def __init__(self, gateway: subprocess.Popen) -> None:
        self.process = object()  # it ran
        self.gateway = gateway
        self.gateway_running: list[bool] = []
        self.escalated_to: str | None = None

    def stop(self, timeout: float = 30.0) -> int:
        self.gateway_running.append(self.gateway.poll() is None)
        time.sleep(1.5)  # Triton unloading its models
        self.gateway_running.append(self.gateway.poll() is None)
        return 0


def test_the_gateway_is_told_to_stop_before_triton_and_both_stop_together():
    # A stand-in gateway in its own process group, as launch starts it: it exits on SIGTERM after 1 s of cleanup.
    gateway = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.0), sys.exit(0)))\n"
            "time.sleep(60)\n",
        ],
        start_new_session=True,
    )
    time.sleep(0.3)  # its handler is set
    server = SlowServer(gateway)
    running = launch._Running(server=server, gateway=gateway)
    out = io.StringIO()
    began = time.monotonic()
    launch._shut_down(running, out)
    took = time.monotonic() - began
    assert gateway.returncode == 0  # it exited on its own, from the SIGTERM
    # Its cleanup ran while Triton was stopping (one after the other, it would have ended before Triton's stop began).
    assert server.gateway_running == [True, False]
    assert took < 2.3, took  # side by side: 1.5 s (Triton) and 1 s (gateway), not 2.5 s
    assert "stopped (" in out.getvalue()


class AbortingServer:
    """A server that served, and died of SIGABRT as it shut down (its Python backend's directory taken away)."""

    process = object()
    escalated_to = None
    log_path = "/tmp/tritonserver.log"

    def stop(self, timeout: float = 30.0) -> int:
        return -6

    def log_text(self) -> str:
        return (
            "terminate called after throwing an instance of 'triton::backend::python::PythonBackendException'\n"
            "  what():  fts_read error: /tmp/python_env_abc123 error: No such file or directory\nSignal (6) received.\n"
        )


def test_a_server_that_did_not_stop_cleanly_is_reported_so():
    out = io.StringIO()
    assert launch._shut_down(launch._Running(server=AbortingServer(), ready=True), out) is False
    said = out.getvalue()
    assert "not cleanly: tritonserver died of SIGABRT while it shut down (fts_read error: /tmp/python_env_" in said
    assert "/tmp/tritonserver.log" in said
    out = io.StringIO()
    assert launch._shut_down(launch._Running(server=SlowServer(subprocess.Popen(["true"]))), out) is True
    assert "not cleanly" not in out.getvalue()
