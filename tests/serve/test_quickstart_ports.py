"""The quickstart refuses ports another program holds before it installs anything: a server already on its HTTP port
would otherwise answer in launch's place, and the script would end "successfully" against it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from tests.support.serving import ROOT


def test_a_held_http_port_stops_the_quickstart_before_the_install(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "quickstart.sh", tmp_path / "scripts" / "quickstart.sh")
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        env = {**os.environ, "QUICKSTART_HTTP_PORT": str(port), "QUICKSTART_DIR": str(tmp_path / "work")}
        done = subprocess.run(
            ["bash", str(tmp_path / "scripts" / "quickstart.sh")], capture_output=True, text=True, env=env, timeout=60
        )
    assert done.returncode == 1
    assert f"port {port} is in use" in done.stderr and "QUICKSTART_HTTP_PORT=" in done.stderr
    assert not (tmp_path / ".venv").exists() and not (tmp_path / "work").exists()  # nothing installed or written
