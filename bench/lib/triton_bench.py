"""The Triton server the backend benchmarks measure through (backend_throughput.py, backend_faults.py): their
options, the engine arguments per device, the model repository they write and the server they start."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .tiny import CPU_ENV, OFFLINE_ENV, build_tiny_model

if TYPE_CHECKING:
    from vllm_repo.serve.server import TritonServer
    from vllm_repo.serve.triton_client import GenerateResponse, GenerateStreamConnection

PROMPT = "The history of the printing press begins with"
MODEL_NAME = "bench"


def default_engine_args(model: str, device: str) -> dict[str, Any]:
    if device == "cpu":
        return {
            "model": model,
            "dtype": "float32",
            "max_model_len": 1024,
            "kv_cache_memory_bytes": 128 * 2**20,
            "max_num_seqs": 64,
        }
    # Two engines share the GPU (Triton's and the raw one): each gets under half of it.
    return {"model": model, "max_model_len": 4096, "gpu_memory_utilization": 0.42}


def sampling_json(tokens: int) -> str:
    return json.dumps({"max_tokens": tokens, "ignore_eos": True})


def write_model(
    repo: Path,
    settings: dict[str, Any],
    kind: str,
    name: str = MODEL_NAME,
    parameters: dict[str, str] | None = None,
    backend: str = "vllm",
) -> None:
    (repo / name / "1").mkdir(parents=True)
    params = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in (parameters or {}).items()
    )
    (repo / name / "config.pbtxt").write_text(
        f'backend: "{backend}"\ninstance_group [ {{ count: 1, kind: {kind} }} ]\n{params}'
    )
    (repo / name / "1" / "model.json").write_text(json.dumps(settings))


def gpu_memory_used() -> list[str]:
    """nvidia-smi's per-GPU memory in use (which GPUs Triton's engine landed on)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"nvidia-smi: {exc}"]
    return [line.strip() for line in out.splitlines() if line.strip()]


def add_server_options(parser: argparse.ArgumentParser, model_help: str) -> None:
    """The options every backend benchmark takes: where it runs, the model and its settings."""
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--model", help=model_help)
    parser.add_argument("--engine-args", default="{}", help="model.json settings over the defaults, as JSON")


@dataclass
class BenchWork:
    """A benchmark's scratch directory, the environment its server and engines run with (set in this process too,
    before vLLM loads) and the model's engine arguments."""

    work: Path
    env: dict[str, str]
    settings: dict[str, Any]

    @property
    def repo(self) -> Path:
        return self.work / "repo"

    def server(self, extra_args: list[str], backend_directory: Path | None = None) -> TritonServer:
        """A Triton server (not started) on the repository, with the bundled backend or ``backend_directory``."""
        return triton_server(self.repo, self.env, self.work / "tritonserver.log", extra_args, backend_directory)


def triton_server(
    repo: Path,
    env: dict[str, str],
    log_path: Path,
    extra_args: list[str] | tuple[str, ...] = (),
    backend_directory: Path | None = None,
) -> TritonServer:
    """A Triton server (not started) on ``repo``, its backend run by this Python, the server's files from
    VLLM_REPO_TRITON_HOME."""
    from vllm_repo.serve.server import TritonServer

    return TritonServer(
        repo,
        serving_python=sys.executable,
        triton_home=os.environ["VLLM_REPO_TRITON_HOME"],
        env=env,
        log_path=log_path,
        backend_directory=backend_directory,
        extra_args=list(extra_args),
    )


def prepare(parser: argparse.ArgumentParser, args: argparse.Namespace, prefix: str, stats: bool) -> BenchWork:
    """The environment set, the model found (on the CPU by default the tiny model, built here) and its engine
    arguments: the device's defaults, vLLM's stats on or off, then --engine-args."""
    env = dict(OFFLINE_ENV, **(CPU_ENV if args.device == "cpu" else {}))
    os.environ.update(env)
    work = Path(tempfile.mkdtemp(prefix=prefix))
    if args.model is None and args.device == "gpu":
        parser.error("--model is required with --device gpu")
    model_dir = args.model or str(build_tiny_model(work / "tiny-llama"))
    settings = dict(
        default_engine_args(model_dir, args.device), disable_log_stats=not stats, **json.loads(args.engine_args)
    )
    return BenchWork(work, env, settings)


@dataclass(frozen=True)
class StreamRead:
    """One generate_stream request as a load generator sees it: seconds to its first response, the output tokens
    and responses it got, and whether the client closed it before its end."""

    first_s: float
    tokens: int
    responses: int
    closed: bool = False


async def read_stream(
    conn: GenerateStreamConnection,
    model: str,
    body: dict[str, Any],
    close_after: int | None = None,
    on_response: Callable[[GenerateResponse], None] | None = None,
) -> StreamRead:
    """``body`` streamed on ``conn`` (vllm_repo.serve.triton_client's lean generate_stream connection), read to its
    end, or closed by the client after ``close_after`` responses; ``on_response`` is called at each. Failures raise
    what the client raises (TritonAnswerError, TritonUnreachable)."""
    start = time.perf_counter()
    first: float | None = None
    tokens = responses = 0
    async with contextlib.aclosing(conn.generate_stream(model, body)) as stream:
        async for response in stream:
            if first is None:
                first = response.received - start
            responses += 1
            tokens += response.num_output_tokens or 0
            if on_response is not None:
                on_response(response)
            if close_after is not None and responses >= close_after:
                await conn.close()
                return StreamRead(first, tokens, responses, closed=True)
    return StreamRead(first if first is not None else time.perf_counter() - start, tokens, responses)
