"""A real Ray cluster on this host: raylets with logical GPUs, started and stopped whole."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from vllm_repo.serve import ray_cluster
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.processes import process_table
from vllm_repo.serve.ray_cluster import (
    RayClusterError,
)


class LocalRay:
    """Raylets on this host, each `ray start --block` in a session of its own, with logical GPUs (a resource
    check needs no real ones). stop() ends every process of those sessions (Ray's workers make process groups of
    their own, not sessions) and removes the temporary directory."""

    def __init__(self, ray: Path) -> None:
        self.ray = ray
        # Short: Ray's Unix sockets live under it, and their paths may not exceed 107 bytes.
        self.temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.processes: list[subprocess.Popen] = []
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def start(self, gpus: int, head: bool = False) -> None:
        where = [f"--address={self.address}"]
        if head:
            where = ["--head", f"--port={self.port}", "--include-dashboard=false"]
        command = [
            str(self.ray),
            "start",
            *where,
            f"--num-gpus={gpus}",
            "--num-cpus=1",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp}",
            "--disable-usage-stats",
            "--block",
        ]
        log = open(self.temp / f"start-{len(self.processes)}.log", "w")  # noqa: SIM115 (the process keeps it)
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def wait_nodes(self, count: int, python: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(RayClusterError):
                if len(ray_cluster.probe_cluster(python, self.address).nodes) >= count:
                    return
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                logs = "\n".join(p.read_text()[-2000:] for p in sorted(self.temp.glob("start-*.log")))
                raise RuntimeError(f"the Ray cluster did not come up with {count} nodes:\n{logs}")
            time.sleep(0.5)

    def members(self) -> list[int]:
        sessions = {p.pid for p in self.processes}
        return [pid for pid, _, fields in process_table() if int(fields[3]) in sessions and fields[0] not in "ZX"]

    def stop(self) -> None:
        for process in reversed(self.processes):  # followers first, then the head
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.2)
        # `ray start --block` can wait on an idle worker that outlives its raylet: what is left is ended by pid,
        # again until none is left (a killed process is listed until it dies, and a dying raylet may still start a
        # worker).
        deadline = time.monotonic() + 15
        while (left := self.members()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for process in self.processes:
            process.wait(timeout=10)
        shutil.rmtree(self.temp, ignore_errors=True)
