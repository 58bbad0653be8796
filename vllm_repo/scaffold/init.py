"""init: scaffold one model of a Triton model repository for the vLLM backend.

Writes ``REPO/NAME/config.pbtxt`` and ``REPO/NAME/1/model.json`` (and ``1/multi_lora.json`` with LoRA adapters) from
the templates shipped in ``vllm_repo._templates``. The files are written into a hidden staging directory inside REPO,
validated there, and only then renamed into place, so an interrupted or failed init leaves no half-written model and
an existing model is replaced (with ``force``) in one rename.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import string
import tempfile
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.hf import is_repo_id
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.schema.loader import accepts
from vllm_repo.validate.diagnostics import Diagnostic

VERSION = "1"
BACKEND = "vllm"
STAGING_PREFIX = ".vllm-repo-init-"
SIZING_KEYS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len")
# Triton takes a model's name from its directory; keep to characters every filesystem, URL and shell takes as is.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class InitError(VllmRepoError):
    """init refused to write the model: it exists, or the result would not pass validate (``diagnostics``)."""


@dataclass
class EnginePlan:
    """The engine settings init writes, where they came from, and what could not be worked out."""

    settings: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class InitResult:
    model_dir: Path
    files: list[Path]
    engine_args: dict[str, Any]
    notes: list[str]
    diagnostics: list[Diagnostic]  # validate's warnings and infos on the written model (errors abort init)
    replaced: bool


# ---------------------------------------------------------------------------------------------------------------------
# Names and command-line values
# ---------------------------------------------------------------------------------------------------------------------


def default_model_name(model: str) -> str:
    """A model directory name from a HF repo id ("Qwen/Qwen2.5-0.5B-Instruct" -> "Qwen2.5-0.5B-Instruct") or a local
    path (its last component). Characters a directory name should not have become "-"."""
    last = model.rstrip("/\\").replace("\\", "/").split("/")[-1]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", last).strip("-.")
    name = re.sub(r"-{2,}", "-", name)[:128]
    if not name or not _SAFE_NAME.match(name) or name.isdigit():
        raise UsageError(f"can't derive a model name from '{model}'", hint="give one with --name NAME")
    return name


def check_model_name(name: str) -> None:
    """Raise UsageError unless ``name`` is a safe model directory name."""
    if name in (".", "..") or not _SAFE_NAME.match(name):
        raise UsageError(
            f"'{name}' is not a safe model name",
            hint="use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/', spaces or '..')",
        )
    if name.isdigit():
        raise UsageError(
            f"'{name}' is not a usable model name: all-digit names look like version directories",
            hint="use a name with a letter in it",
        )


def parse_value(text: str, types: list[str] | None = None) -> Any:
    """A --set value: JSON when it parses (8192, 0.9, true, null, {"a": 1}), else the plain string.

    ``types`` are the JSON types the EngineArgs field accepts: a value that parses as JSON of another type but may be a
    string stays a string (``--set revision=1234`` keeps "1234")."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if types and "string" in types and not accepts(types, value):
        return text
    return value


def parse_assignments(items: list[str], what: str) -> list[tuple[str, str]]:
    """["KEY=VALUE", ...] -> [(KEY, VALUE), ...]; an item without "=" or with an empty key is a UsageError."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} '{item}' is not KEY=VALUE", hint=f"write it as {what} KEY=VALUE")
        pairs.append((key.strip(), value))
    return pairs


def parse_settings(items: list[str], schema: Any | None = None) -> dict[str, Any]:
    """--set KEY=VALUE items as engine settings, typed by the EngineArgs schema where the key is known."""
    settings: dict[str, Any] = {}
    for key, raw in parse_assignments(items, "--set"):
        spec = schema.get(key) if schema is not None else None
        settings[key] = parse_value(raw, spec.types if spec is not None else None)
    return settings


def parse_loras(items: list[str]) -> dict[str, str]:
    """--lora NAME=PATH items. Local paths are made absolute: Triton's working directory is not the user's."""
    loras: dict[str, str] = {}
    for name, raw in parse_assignments(items, "--lora"):
        if name in loras:
            raise UsageError(f"LoRA adapter '{name}' is given twice", hint="give each --lora NAME once")
        path = Path(raw).expanduser()
        loras[name] = str(path.resolve()) if path.exists() else raw
    return loras


def resolve_model(model: str) -> str:
    """A local directory becomes an absolute path (the server runs elsewhere); anything else is taken as a HF id."""
    path = Path(model).expanduser()
    if path.is_dir():
        return str(path.resolve())
    if not is_repo_id(model, owner_required=False):
        raise UsageError(
            f"model '{model}' is neither a local directory nor a Hugging Face repo id (org/name)",
            hint="check the path, or give a repo id like Qwen/Qwen2.5-0.5B-Instruct",
        )
    return model


# ---------------------------------------------------------------------------------------------------------------------
# Engine plan
# ---------------------------------------------------------------------------------------------------------------------


def plan_engine(
    model: str, gpu: str | None, tp: int | None, max_model_len: int | None, user_settings: dict[str, Any] | None = None
) -> EnginePlan:
    """tensor_parallel_size, gpu_memory_utilization and max_model_len: from the estimator for ``gpu``, else only what
    the user gave. Never fails: what could not be worked out is said in ``notes``."""
    plan = EnginePlan()
    if tp is not None:
        plan.settings["tensor_parallel_size"] = tp
    if max_model_len is not None:
        plan.settings["max_model_len"] = max_model_len
    if gpu is None:
        given = set(plan.settings) | set(user_settings or {})
        left = [k for k in SIZING_KEYS if k not in given]
        if left:
            plan.notes.append(
                f"no --gpu given: {', '.join(left)} left to vLLM's defaults (init with --gpu, or "
                "`vllm-repo estimate`, to size them)"
            )
        return plan
    from vllm_repo.estimate.fit import fit_engine_settings

    # An unknown GPU name is the estimator's UsageError, with the names it knows.
    fitted, notes = fit_engine_settings(
        model, gpu, tensor_parallel_size=tp, max_model_len=max_model_len, user_settings=user_settings
    )
    plan.settings.update(fitted)
    plan.notes.extend(notes)
    return plan


# The least share of a GPU worth starting an engine with: below it the weights of any model worth serving don't fit.
MIN_SHARE = 0.05


def share_of_shared_gpus(
    repo: Path, name: str, tp: int | None, settings: dict[str, Any], vllm_version: str | None
) -> tuple[float, str] | None:
    """gpu_memory_utilization for a new model whose GPUs other models of the repository already use: what they leave
    (rounded down to a hundredth), with a note that says so. None when the GPUs are free enough for vLLM's default or
    the user set it. Raises InitError when they leave too little."""
    if "gpu_memory_utilization" in settings or not repo.is_dir():
        return None
    from vllm_repo.repository import open_repository, placement
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    default = load_schema(choose_schema_version(vllm_version, start=repo).schema_version).default_gpu_memory_utilization
    size = read_engine_settings(settings).overridden_by(tensor_parallel_size=tp).parallel_size
    gpus = range(min(size, placement.MAX_GPU_IDS))
    left, on_it = placement.fraction_left(open_repository(repo), gpus, default, without=name)
    if left >= default:
        return None
    parts = " + ".join(f"{e.model.name} {e.fraction:g}" for e in on_it)
    share = math.floor(left * 100 + 1e-9) / 100
    if share < MIN_SHARE:
        raise InitError(
            f"the GPU '{name}' would run on is taken: {parts} of its memory leave {max(left, 0):.2f}",
            hint="lower gpu_memory_utilization in those models' model.json, or pin models to different GPUs "
            "(instance_group KIND_GPU gpus: [...]) and give this one --set gpu_memory_utilization=X",
        )
    return share, (
        f"gpu_memory_utilization {share:g}: what the other models on the same GPU leave ({parts}); "
        "--set gpu_memory_utilization=X to choose"
    )


# ---------------------------------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------------------------------


def _template(name: str) -> str:
    return resources.files("vllm_repo._templates").joinpath(name).read_text(encoding="utf-8")


def _tensor_block(tensor: contract.Tensor) -> str:
    lines = [
        "  {",
        f'    name: "{tensor.name}"',
        f"    data_type: {tensor.data_type}",
        f"    dims: [ {', '.join(str(d) for d in tensor.dims)} ]",
    ]
    if tensor.optional:
        lines.append("    optional: true")
    lines.append("  }")
    return "\n".join(lines)


def render_config(name: str, model: str, engine_args: dict[str, Any]) -> str:
    world = read_engine_settings(engine_args).parallel_size
    # One engine per model: vLLM batches internally and places itself on its tensor_parallel_size x
    # pipeline_parallel_size GPUs. KIND_MODEL leaves placement to it (KIND_GPU is for single-GPU models only, and a
    # count above 1 would start a second engine competing for the same memory).
    comment = (
        f"# One vLLM engine over {world} GPUs: KIND_MODEL lets vLLM place itself."
        if world > 1
        else "# One vLLM engine (it batches internally); KIND_MODEL lets vLLM choose its device."
    )
    return string.Template(_template("config.pbtxt")).substitute(
        model=model,
        version=VERSION,
        name=name,
        backend=BACKEND,
        inputs=",\n".join(_tensor_block(t) for t in contract.INPUTS),
        outputs=",\n".join(_tensor_block(t) for t in contract.OUTPUTS),
        instance_group_comment=comment,
        instance_count=1,
        instance_kind="KIND_MODEL",
    )


def lora_rank_setting(loras: dict[str, str], vllm_version: str | None = None) -> int | None:
    """max_lora_rank for the adapters, when one of them has a rank above vLLM's default (which fails at load):
    the smallest rank vLLM accepts that holds the largest adapter's ``r`` (from its adapter_config.json)."""
    ranks = []
    for path in loras.values():
        try:
            ranks.append(int(json.loads((Path(path) / "adapter_config.json").read_text(encoding="utf-8"))["r"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not ranks:
        return None
    from vllm_repo.schema.loader import choose_schema_version, load_schema

    field_ = load_schema(choose_schema_version(vllm_version).schema_version).get("max_lora_rank")
    default = field_.default if field_ is not None and isinstance(field_.default, int) else 16
    if max(ranks) <= default:
        return None
    choices = sorted(c for c in (field_.choices or []) if isinstance(c, int)) if field_ is not None else []
    return next((c for c in choices if c >= max(ranks)), max(ranks))


def render_engine_args(
    model: str, plan: EnginePlan, settings: dict[str, Any], loras: dict[str, str], vllm_version: str | None = None
) -> dict:
    engine_args = json.loads(_template("model.json"))
    engine_args["model"] = model
    engine_args.update(plan.settings)
    if loras:
        engine_args["enable_lora"] = True
        engine_args.setdefault("max_loras", len(loras))
        rank = lora_rank_setting(loras, vllm_version)
        if rank is not None:
            engine_args["max_lora_rank"] = rank
    engine_args.update(settings)  # the user's --set wins over everything init worked out
    return engine_args


def _dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------------


def _validate(model_dir: Path, vllm_version: str | None) -> list[Diagnostic]:
    from vllm_repo.validate import validate_paths

    return list(validate_paths([model_dir], vllm_version=vllm_version).diagnostics)


def _link_siblings(repo: Path, staging: Path, name: str) -> None:
    for entry in repo.iterdir():
        if entry.name in (name, staging.name) or entry.name.startswith(".") or not entry.is_dir():
            continue
        with contextlib.suppress(OSError):
            (staging / entry.name).symlink_to(entry.resolve(), target_is_directory=True)


def _remove_stale_staging(repo: Path) -> None:
    """Staging directories left by an init that was killed (SIGKILL, power loss): never a usable model."""
    for entry in repo.glob(STAGING_PREFIX + "*"):
        if entry.is_dir() and _stale(entry):
            shutil.rmtree(entry, ignore_errors=True)


def _stale(entry: Path) -> bool:
    try:
        pid = int((entry / ".pid").read_text())
    except (OSError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def init_model(
    repo: str | os.PathLike,
    model: str,
    *,
    name: str | None = None,
    gpu: str | None = None,
    tensor_parallel_size: int | None = None,
    max_model_len: int | None = None,
    settings: dict[str, Any] | None = None,
    loras: dict[str, str] | None = None,
    force: bool = False,
    vllm_version: str | None = None,
) -> InitResult:
    """Scaffold ``repo/<name>`` for ``model``. Nothing is written when it raises: InitError when the model exists and
    ``force`` is false or when the result would not pass validate, UsageError for an unsafe name or bad values."""
    repo = Path(repo)
    if repo.exists() and not repo.is_dir():
        raise UsageError(
            f"{repo} exists and is not a directory", hint="give a repository directory (it may not exist yet)"
        )
    name = name if name is not None else default_model_name(model)
    check_model_name(name)
    for label, value in (("--tp", tensor_parallel_size), ("--max-model-len", max_model_len)):
        if value is not None and value < 1:
            raise UsageError(f"{label} must be a positive integer, not {value}")
    target = repo / name
    if (target.exists() or target.is_symlink()) and not force:
        raise InitError(f"{target} already exists", hint="pass --force to replace it, or choose another --name")
    if target.exists() and not target.is_dir():
        raise InitError(f"{target} exists and is not a directory; remove it first")

    model_ref = resolve_model(model)
    settings = dict(settings or {})
    shared = share_of_shared_gpus(repo, name, tensor_parallel_size, settings, vllm_version)
    if shared is not None:
        settings["gpu_memory_utilization"], share_note = shared
    plan = plan_engine(model_ref, gpu, tensor_parallel_size, max_model_len, settings)
    if shared is not None:
        plan.notes.insert(0, share_note)
    engine_args = render_engine_args(model_ref, plan, settings, dict(loras or {}), vllm_version)
    config_text = render_config(name, model, engine_args)

    repo.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(repo)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=repo))
    try:
        (staging / ".pid").write_text(str(os.getpid()))
        staged = staging / name
        version_dir = staged / VERSION
        version_dir.mkdir(parents=True)
        files = [staged / "config.pbtxt", version_dir / "model.json"]
        _write(files[0], config_text)
        _write(files[1], _dump_json(engine_args))
        if loras:
            files.append(version_dir / "multi_lora.json")
            _write(files[-1], _dump_json(loras))

        # The repository's other models sit beside the new one (as links) so cross-model checks see them, e.g. the
        # sum of gpu_memory_utilization on a shared GPU. Findings name the staging directory; point them at where
        # the files will be.
        _link_siblings(repo, staging, name)
        diagnostics = [_relocate(d, staging.name) for d in _validate(staged, vllm_version)]
        errors = [d for d in diagnostics if d.severity.value == "error"]
        if errors:
            raise InitError(
                f"the scaffolded model for '{model}' does not pass validate; nothing was written",
                hint="the findings above say what to change (--set KEY=VALUE overrides a setting)",
                diagnostics=diagnostics,
            )

        replaced = _move_into_place(staged, target, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    final_files = [target / f.relative_to(staging / name) for f in files]
    return InitResult(
        model_dir=target,
        files=final_files,
        engine_args=engine_args,
        notes=plan.notes,
        diagnostics=diagnostics,
        replaced=replaced,
    )


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _move_into_place(staged: Path, target: Path, staging: Path) -> bool:
    """Rename ``staged`` to ``target``. An existing target is first moved aside into ``staging`` (removed with it)
    and put back if the second rename fails, so at every instant ``target`` is either the old or the new model."""
    if not (target.exists() or target.is_symlink()):
        os.rename(staged, target)
        return False
    aside = staging / ".replaced"
    os.rename(target, aside)
    try:
        os.rename(staged, target)
    except BaseException:
        os.rename(aside, target)
        raise
    return True


def _relocate(diag: Diagnostic, staging_name: str) -> Diagnostic:
    if not diag.file or staging_name not in diag.file:
        return diag
    return replace(diag, file=diag.file.replace(staging_name + os.sep, ""))
