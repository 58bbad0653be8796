"""What a comparison compared, for its report: versions (vLLM, Triton, each backend), engine arguments, the metrics
settings of each side, and the GPU (or the CPU where there is none)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_repo.benchmark.compare import Server
    from vllm_repo.benchmark.vllm_serve import ServeArgs
    from vllm_repo.serve.launch_plan import LaunchPlan
    from vllm_repo.serve.python_env import PythonInfo

REPORT_CUSTOM_METRICS = "REPORT_CUSTOM_METRICS"


def describe_setup(
    repository: Path, model_name: str, info: PythonInfo, serve_args: ServeArgs | None, servers: list[Server]
) -> dict[str, Any]:
    """Everything known before a server starts; describe_plan adds Triton's once it is planned."""
    from vllm_repo import __version__
    from vllm_repo.repository import open_repository

    model = next(m for m in open_repository(repository).models if m.name == model_name)
    engine_args = model.engine_args_data()
    setup: dict[str, Any] = {
        "vllm": info.vllm_version,
        "python": str(info.executable),
        "vllm_repo": __version__,
        "engine_args": engine_args,
        "gpu": gpu_description(),
        "backends": {s.name: backend_description(s.name) for s in servers if s.name != "vllm-serve"},
        "metrics": metrics_settings(model, engine_args, servers),
    }
    if serve_args is not None:
        setup["vllm_serve_options"] = serve_args.serve_options
        setup["model_json_checked_against"] = serve_args.checked_against
    return setup


def describe_plan(plan: LaunchPlan) -> dict[str, Any]:
    return {"triton": plan.server.describe(), "triton_environment": plan.env, "launch_notes": plan.notes}


def backend_description(name: str) -> dict[str, Any]:
    """The bundled backend, or backend=DIR: where it is, whether it is vllm-repo's, and its model.py's digest."""
    from vllm_repo import __version__

    if not name.startswith("backend="):
        return {"backend": f"bundled with vllm-repo {__version__}"}
    directory = Path(name.removeprefix("backend="))
    backend = directory / "vllm" if (directory / "vllm" / "model.py").is_file() else directory
    model_py = backend / "model.py"
    digest = hashlib.sha256(model_py.read_bytes()).hexdigest()[:16] if model_py.is_file() else None
    return {
        "backend": str(backend),
        "vllm_repo_backend": (backend / "vllm_repo_backend").is_dir(),
        "model_py_sha256": digest,
    }


def metrics_settings(model: Any, engine_args: dict[str, Any], servers: list[Server]) -> dict[str, str]:
    """How each kind of server keeps metrics: vllm serve as it ships, Triton as config.pbtxt says."""
    config = model.config.config if model.config is not None else None
    param = config.parameters.get(REPORT_CUSTOM_METRICS) if config is not None else None
    reported = param.string_value.strip() if param is not None else ""
    on = reported.lower() in ("true", "1", "yes", "on")
    stats = engine_args.get("disable_log_stats")
    settings = {
        "triton": (
            f"{REPORT_CUSTOM_METRICS} {reported or 'not set'} in config.pbtxt: vLLM's metrics "
            f"{'reported on' if on else 'not reported on'} Triton's metrics port; vLLM's stats logging "
            + ("on (model.json disable_log_stats false)" if stats is False else "off (the bundled backend's default)")
        )
    }
    if any(s.name == "vllm-serve" for s in servers):
        settings["vllm-serve"] = "/metrics on, as vllm serve ships; vLLM's stats logging " + (
            "off (model.json disable_log_stats true)" if stats else "on"
        )
    return settings


def gpu_description() -> str:
    """nvidia-smi's name and memory of each GPU, or the CPU's model and core count where there is no NVIDIA GPU."""
    from vllm_repo.serve.launch_plan import has_nvidia_gpu

    if has_nvidia_gpu():
        try:
            done = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
            if lines:
                return f"{len(lines)} x {lines[0]}" if len(set(lines)) == 1 else "; ".join(lines)
        except (OSError, subprocess.TimeoutExpired):
            pass
        return "an NVIDIA GPU (nvidia-smi did not answer)"
    return f"none: {cpu_name()}, {os.cpu_count()} cores"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "the CPU"
