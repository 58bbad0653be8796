"""The model's configuration as the backend reads it at load: config.pbtxt's parameters, ``<version>/model.json``
(vLLM's engine arguments), ``<version>/multi_lora.json`` (the LoRA adapters), and the GPUs the instance gets.

Every problem is a BackendConfigError naming the file, the key and what to do, before any engine starts.

config.pbtxt parameters:
  REPORT_CUSTOM_METRICS     "true": vLLM's metrics (vllm:*) on Triton's metrics endpoint, unless model.json says
                            "disable_log_stats": true; a histogram's series as counters, reported a bounded number of
                            times a second (metrics_report.py)
  REPORT_HISTOGRAMS_PER_VALUE  "true": the histograms as Triton histogram metrics, one round trip to the server per
                            value (as Triton's own vLLM backend: its `# TYPE ... histogram` lines, a cost that grows
                            with the tokens per second)
  ENABLE_VLLM_HEALTH_CHECK  "true": unload the model when the engine dies (needs explicit model control)
  STREAM_ONE_RESPONSE_PER_TOKEN  "true": a stream's merged outputs split into one response per token
  DEFAULT_MAX_TOKENS        max_tokens when a request gives none (default: the rest of the context window,
                            never vLLM's silent 16)
  ENGINE_PROCESS            "true": vLLM's AsyncLLM (and its OpenAI app) in a process of its own, the stub relaying
                            (engine_link.py): for many concurrent streams; everything else as without it. Left out:
                            on for an engine of one GPU (KIND_GPU, or init's KIND_MODEL where model.json takes one
                            GPU and vLLM runs on GPUs), off on the CPU and over several GPUs (engine_link.wanted)
  GPU_DEVICE_IDS            KIND_MODEL only: GPUs for the instance, e.g. "0,1"; "0,1;2,3" gives one group per instance
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from . import contract
from .contract import ENGINE_ARGS_FILE, LORA_FILE
from .errors import BackendConfigError, RequestError, did_you_mean
from .native import parse_bool


def auto_complete(auto_complete_model_config: Any) -> Any:
    """Fill the backend's contract into a minimal config.pbtxt: inputs and outputs that are missing, decoupled
    transaction policy, max_batch_size 0 (vLLM batches by itself). Listed tensors with a contradicting type are
    an error naming the tensor."""
    config = auto_complete_model_config.as_dict()
    for kind, tensors, existing, add in (
        ("input", contract.INPUTS, config.get("input", []), auto_complete_model_config.add_input),
        ("output", contract.OUTPUTS, config.get("output", []), auto_complete_model_config.add_output),
    ):
        listed = {t["name"]: t for t in existing}
        for name, data_type, dims, optional in tensors:
            if name in listed:
                have = listed[name].get("data_type")
                if have not in (None, "TYPE_INVALID", data_type):
                    raise ValueError(
                        f"config.pbtxt {kind} '{name}' has data_type {have}; the vLLM backend needs {data_type}"
                    )
                continue
            entry: dict[str, Any] = {"name": name, "data_type": data_type, "dims": list(dims)}
            if kind == "input":
                entry["optional"] = optional
            add(entry)
    auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
    auto_complete_model_config.set_max_batch_size(0)
    return auto_complete_model_config


def config_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """config.pbtxt ``parameters`` as a plain {key: string_value} dict."""
    params = model_config.get("parameters") or {}
    return {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in params.items()}


def bool_parameter(params: Mapping[str, str], key: str, default: bool = False) -> bool:
    if key not in params or params[key].strip() == "":
        return default
    try:
        return parse_bool(params[key], key)
    except RequestError:
        raise BackendConfigError(
            f'config.pbtxt parameter {key}: "{params[key]}" is not a boolean; use "true" or "false"'
        ) from None


def int_parameter(params: Mapping[str, str], key: str, minimum: int = 1) -> int | None:
    if key not in params or params[key].strip() == "":
        return None
    raw = params[key].strip()
    if not re.fullmatch(r"[+-]?\d+", raw) or int(raw) < minimum:
        raise BackendConfigError(f'config.pbtxt parameter {key}: "{raw}" is not an integer >= {minimum}')
    return int(raw)


def load_json_file(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise BackendConfigError(f"{path}: not found; {what}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackendConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None


def load_lora_adapters(version_dir: str) -> dict[str, str]:
    """multi_lora.json ({name: path}); relative paths are taken relative to the version directory."""
    path = os.path.join(version_dir, LORA_FILE)
    data = load_json_file(path, 'with "enable_lora": true the backend needs adapters listed as {"name": "path"}')
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise BackendConfigError(f'{path}: must be a JSON object {{"adapter name": "path", ...}}')
    adapters = {}
    for name, adapter_path in data.items():
        if not os.path.isabs(adapter_path) and os.path.exists(os.path.join(version_dir, adapter_path)):
            adapter_path = os.path.join(version_dir, adapter_path)
        adapters[name] = adapter_path
    return adapters


def load_engine_config(version_dir: str) -> dict[str, Any]:
    """``<version>/model.json``: vLLM's engine arguments, as a dict."""
    path = os.path.join(version_dir, ENGINE_ARGS_FILE)
    engine_config = load_json_file(path, "each model version needs <version>/model.json with vLLM's engine arguments")
    if not isinstance(engine_config, dict):
        raise BackendConfigError(f"{path}: must be a JSON object")
    return engine_config


def build_engine_args(engine_config: Mapping[str, Any], engine_args_class: type, vllm_version: str, path: str) -> Any:
    """vLLM's AsyncEngineArgs from model.json (at ``path``). An unknown key is named with a did-you-mean, not left to
    a TypeError from inside vLLM."""
    config = dict(engine_config)
    fields = {f.name for f in dataclasses.fields(engine_args_class)}
    unknown = [k for k in config if k not in fields]
    if unknown:
        details = "; ".join(
            f'"{k}" is not a vLLM {vllm_version} engine argument{did_you_mean(k, fields)}' for k in unknown
        )
        raise BackendConfigError(f"{path}: {details}")
    # vLLM's in-process Prometheus registry and periodic stats log are unreachable through Triton; metrics go
    # through REPORT_CUSTOM_METRICS instead. An explicit setting in model.json wins.
    config.setdefault("disable_log_stats", True)
    try:
        return engine_args_class(**config)
    except (TypeError, ValueError) as exc:
        raise BackendConfigError(f"{path}: {exc}") from exc


def world_size(engine_config: Mapping[str, Any]) -> int:
    """The GPUs one engine of model.json takes: tensor_parallel_size x pipeline_parallel_size."""
    return int(engine_config.get("tensor_parallel_size", 1) or 1) * int(
        engine_config.get("pipeline_parallel_size", 1) or 1
    )


def one_gpu_engine(engine_config: Mapping[str, Any]) -> bool:
    """Whether one engine of model.json runs on one GPU in its own processes: world size 1, no data parallelism, and
    not on Ray (whose workers a cluster places)."""
    executor = str(engine_config.get("distributed_executor_backend") or "").lower()
    data_parallel = int(engine_config.get("data_parallel_size", 1) or 1)
    return world_size(engine_config) == 1 and data_parallel == 1 and executor != "ray"


def plan_visible_devices(
    kind: str,
    device_id: int,
    instance_name: str,
    world_size: int,
    gpu_device_ids: str | None,
) -> str | None:
    """CUDA_VISIBLE_DEVICES for this model instance, or None to leave it alone.

    - KIND_GPU: the device Triton assigned (one GPU per instance; tensor/pipeline parallelism needs KIND_MODEL).
    - KIND_MODEL with GPU_DEVICE_IDS: "0,1" for every instance, or "0,1;2,3" with one group per instance.
    - KIND_MODEL with count > 1 and no GPU_DEVICE_IDS: instance k gets GPUs [k*world, (k+1)*world), instead of
      every instance piling onto GPU 0.
    """
    if kind == "GPU":
        if world_size > 1:
            raise BackendConfigError(
                f"KIND_GPU gives each instance one GPU, but model.json asks for {world_size} "
                "(tensor_parallel_size x pipeline_parallel_size); use KIND_MODEL in config.pbtxt's instance_group"
            )
        return str(device_id) if device_id >= 0 else None
    if kind != "MODEL":
        return None
    match = re.search(r"_(\d+)$", instance_name or "")
    index = int(match.group(1)) if match else 0
    if gpu_device_ids and gpu_device_ids.strip():
        groups = [g.strip() for g in gpu_device_ids.split(";") if g.strip()]
        group = groups[index] if len(groups) > 1 and index < len(groups) else groups[0]
        if len(groups) > 1 and index >= len(groups):
            raise BackendConfigError(
                f"GPU_DEVICE_IDS has {len(groups)} groups but this is instance {index}; give one group per instance"
            )
        try:
            ids = [int(x) for x in group.split(",")]
        except ValueError:
            raise BackendConfigError(
                f'GPU_DEVICE_IDS: "{gpu_device_ids}" is not a comma-separated list of GPU ids (e.g. "0,1")'
            ) from None
        if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
            raise BackendConfigError(f'GPU_DEVICE_IDS: "{group}" must list distinct non-negative GPU ids')
        if len(ids) != world_size:
            raise BackendConfigError(
                f'GPU_DEVICE_IDS: "{group}" lists {len(ids)} GPUs but model.json needs {world_size} '
                "(tensor_parallel_size x pipeline_parallel_size)"
            )
        return ",".join(str(i) for i in ids)
    if index > 0:
        return ",".join(str(i) for i in range(index * world_size, (index + 1) * world_size))
    return None


# vLLM's lines when one of its processes dies: the multiproc executor's worker monitor ("Worker proc VllmWorker-0 died
