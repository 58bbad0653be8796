"""infer prints generated text as it came when piped, and with its control characters escaped on a terminal: a random
model's tokens can hold escape sequences that would clear the screen or garble what follows. The server here plays
Triton's generate_stream endpoint only."""

from __future__ import annotations

import http.server
import json
import os
import pty
import subprocess
import sys
import threading

from vllm_repo.serve.infer import terminal_safe
from vllm_repo.serve.ports import free_port

GARBLED = "ok\x1b[2J\x07 then\ttab\x85"


def stream_server(port: int) -> http.server.HTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            event = {"text_output": GARBLED, "finish_reason": "length"}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _infer_command(port: int) -> list[str]:
    return [sys.executable, "-m", "vllm_repo", "infer", "tiny", "hi", "--url", f"http://127.0.0.1:{port}"]


def test_terminal_safe_escapes_what_a_terminal_acts_on_and_keeps_newlines_tabs_and_text():
    assert terminal_safe(GARBLED) == "ok\\x1b[2J\\x07 then\ttab\\x85"
    assert terminal_safe("line\nnext é 日本") == "line\nnext é 日本"


def test_piped_output_is_the_text_as_generated():
    port = free_port()
    server = stream_server(port)
    try:
        done = subprocess.run(_infer_command(port), capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert done.stdout == GARBLED + "\n"


def test_a_terminal_sees_control_characters_escaped():
    port = free_port()
    server = stream_server(port)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(_infer_command(port), stdout=follower, stderr=subprocess.PIPE, text=True)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        server.shutdown()
        os.close(leader)
    text = seen.decode()
    assert "\x1b" not in text and "\x07" not in text
    assert "ok\\x1b[2J\\x07 then\ttab\\x85" in text
