"""launch --docker: serve a repository with the NGC ``tritonserver:<yy.mm>-vllm-python-py3`` container whose vLLM
matches the repository's vLLM release.

The repository is mounted read-only at /models; local model, tokenizer and LoRA directories named in model.json /
multi_lora.json are mounted read-only at their own paths (so the files need no editing), and the host's Hugging Face
cache is shared so hub models are downloaded once. Ports are published on ``host`` only (127.0.0.1 by default).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

from vllm_repo.errors import UsageError
from vllm_repo.releases.ngc import Match
from vllm_repo.repository import open_repository
from vllm_repo.serve.container import CONTAINER_REPOSITORY, choose_container
from vllm_repo.serve.container import server_args as container_server_args
from vllm_repo.serve.errors import DockerError
from vllm_repo.serve.ports import DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from vllm_repo.serve.ray_cluster import RAY_ADDRESS_ENV, given_address
from vllm_repo.serve.ray_placement import RAY_HEAD_PORT

# vLLM's multiprocessing executor puts segments of 160 and 240 MiB in /dev/shm; Docker's default is 64 MiB.
SHM_SIZE = "2g"


@dataclasses.dataclass
class DockerPlan:
    options: list[str]  # docker run's own options, "-x value" pairs kept together
    image: str
    server_args: list[str]  # tritonserver and its flags
    match: Match
    container_name: str
    notes: list[str]

    @property
    def argv(self) -> list[str]:
        return ["docker", "run", *self.options, self.image, *self.server_args]

    def shell_command(self) -> str:
        """The command as a copy-pasteable shell line: one docker option per line, then the image, then the server
        command."""
        lines, opts = ["docker run"], self.options[:]
        while opts:
            arg = opts.pop(0)
            if arg in ("-p", "-v", "-e", "--name", "--gpus", "--network") and opts:
                arg = f"{arg} {shlex.quote(opts.pop(0))}"
            else:
                arg = shlex.quote(arg)
            lines.append(f"  {arg}")
        lines.append(f"  {self.image}")
        lines.append("  " + " ".join(shlex.quote(a) for a in self.server_args))
        return " \\\n".join(lines)


def _local_paths(repository: Path) -> list[Path]:
    """Absolute local directories the models refer to: model, tokenizer, LoRA adapters."""
    values = []
    for model in open_repository(repository).models:
        for version in model.versions:
            for doc, keys in ((version.engine_args, ("model", "tokenizer")), (version.multi_lora, None)):
                if doc is None or not doc.ok or not isinstance(doc.data, dict):
                    continue
                values += [doc.data.get(k) for k in keys] if keys else list(doc.data.values())
    return sorted({Path(v) for v in values if isinstance(v, str) and os.path.isabs(v) and Path(v).exists()})


def docker_plan(
    repository: str | os.PathLike,
    *,
    http_port: int = DEFAULT_HTTP_PORT,
    grpc_port: int = DEFAULT_GRPC_PORT,
    metrics_port: int = DEFAULT_METRICS_PORT,
    host: str = DEFAULT_HOST,
    vllm_version: str | None = None,
    hf_cache: Path | None = None,
    ray_address: str | None = None,
    image: str | None = None,
) -> DockerPlan:
    """``docker run`` of the NGC container that matches the repository's vLLM. With ``ray_address``, the container's
    engines join that Ray cluster: it shares the host's network (Ray's other nodes connect back to the process that
    drives them, on ports Ray picks), and Triton binds ``host`` itself rather than through published ports. With
    ``image`` (one built from the Dockerfile `export kubernetes` writes: the container plus the bundled backend), that
    image runs the same command; the repository is still validated against the chosen container's vLLM."""
    repo = Path(repository).resolve()
    if not repo.is_dir():
        raise UsageError(f"{repository}: no such directory")
    ray_address = given_address(ray_address)
    if ray_address == "auto":
        raise UsageError(
            "--ray-address auto finds the cluster through this host's Ray session files, which the container "
            "cannot see",
            hint=f"give the head's address, e.g. --ray-address 10.0.0.1:{RAY_HEAD_PORT}",
        )
    # The same container, and the same release to validate against, as export kubernetes picks.
    choice = choose_container(vllm_version, repo)
    match = choice.match
    notes = [choice.note if image is None else f"image {image}, built on {choice.note}"]
    name = "vllm-repo-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", repo.name).strip("-.") or "server")
    options = [
        "--rm",
        "--init",
        "--name",
        name,
        "--gpus",
        "all",
        f"--shm-size={SHM_SIZE}",
    ]
    if ray_address is None:
        for port in (http_port, grpc_port, metrics_port):
            options += ["-p", f"{host}:{port}:{port}"]
    else:
        options += ["--network", "host", "-e", f"{RAY_ADDRESS_ENV}={ray_address}"]
        notes.append(
            f"--ray-address {ray_address}: the container shares this host's network, for Ray's other nodes to reach "
            f"its engines; Triton binds {host}"
        )
    options += ["-v", f"{repo}:{CONTAINER_REPOSITORY}:ro"]
    for path in _local_paths(repo):
        options += ["-v", f"{path}:{path}:ro"]
    hf_cache = hf_cache or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    options += ["-v", f"{hf_cache}:/root/.cache/huggingface"]
    if os.environ.get("HF_TOKEN"):
        options += ["-e", "HF_TOKEN"]  # passed by name: the token never appears on the command line
    server_args = container_server_args(
        http_port, grpc_port, metrics_port, address=host if ray_address is not None else None
    )
    return DockerPlan(
        options=options,
        image=image or match.release.image,
        server_args=server_args,
        match=match,
        container_name=name,
        notes=notes,
    )


def run_docker(plan: DockerPlan) -> int:
    """Run the container in the foreground; Ctrl-C / SIGTERM stop it with `docker stop`."""
    if shutil.which("docker") is None:
        raise DockerError(
            "docker is not installed or not on PATH",
            hint="use --dry-run to print the command, or run `vllm-repo launch` without --docker",
        )
    probe = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DockerError(
            f"the Docker daemon is not reachable: {reason}",
            hint="start Docker (and the NVIDIA Container Toolkit for --gpus), or use --dry-run",
        )
    proc = subprocess.Popen(plan.argv, start_new_session=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        subprocess.run(["docker", "stop", "-t", "10", plan.container_name], capture_output=True)
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
