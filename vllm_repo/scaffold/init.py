"""init: scaffold one model of a Triton model repository for the vLLM backend.

Writes ``REPO/NAME/config.pbtxt`` and ``REPO/NAME/1/model.json`` (and ``1/multi_lora.json`` with LoRA adapters) from
the templates shipped in ``vllm_repo._templates``. The files are written into a hidden staging directory inside REPO,
validated there, and only then renamed into place, so an interrupted or failed init leaves no half-written model and
an existing model is replaced (with ``force``) in one rename.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import string
import tempfile
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from vllm_repo.backend.vllm_repo_backend import contract
from vllm_repo.diagnostics.diagnostic import Diagnostic
from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.hf import is_repo_id
from vllm_repo.repository.engine_settings import read_engine_settings
from vllm_repo.scaffold import sharing
from vllm_repo.schema.loader import accepts

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
    next_step: str | None = None  # the command to run next, as a shell runs it


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
    model: str,
    gpu: str | None,
    tp: int | None,
    max_model_len: int | None,
    user_settings: dict[str, Any] | None = None,
    max_utilization: float | None = None,
) -> EnginePlan:
    """tensor_parallel_size, gpu_memory_utilization and max_model_len: from the estimator for ``gpu``, else only what
    the user gave; gpu_memory_utilization no more than ``max_utilization``. Never fails: what could not be worked out
    is said in ``notes``."""
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
        model,
        gpu,
        tensor_parallel_size=tp,
        max_model_len=max_model_len,
        user_settings=user_settings,
        max_utilization=max_utilization,
    )
    plan.settings.update(fitted)
    plan.notes.extend(notes)
    if not fitted and is_repo_id(model):
        plan.notes.extend(_sizing_hint(model))
    return plan


def _sizing_hint(model: str) -> list[str]:
    """What would size a Hub model the estimator could not read (the Hub unreachable): estimate's advice, as a note."""
    from vllm_repo.estimate import ModelFactsError, load_model_facts

    try:
        load_model_facts(model)
    except ModelFactsError as exc:
        if exc.hint:
            return [
                "to size it, give --model a local directory with the model's files, or set HF_HUB_OFFLINE=1 with its "
                f"config.json in the local Hugging Face cache (`hf download {model} config.json` where the Hub is "
                "reachable); behind a proxy, set HTTPS_PROXY"
            ]
    return []


def plan_shared_engine(
    model: str,
    gpu: str | None,
    tp: int | None,
    max_model_len: int | None,
    settings: dict[str, Any],
    room: sharing.GpuRoom,
) -> tuple[EnginePlan, bool]:
    """The engine plan for a model on a GPU other models already crowd, and whether it is left for plan --pack (no
    share written): a share is written only where ``gpu`` is known and the estimator says the engine starts in what
    the others leave."""
    if gpu is not None and room.room >= sharing.MIN_SHARE:
        from vllm_repo.estimate.fit import parse_gpu

        name, count = parse_gpu(gpu)
        # On the GPUs the others leave room on, not spread over more (which they may crowd too).
        on = gpu if count is not None else f"{tp or 1}x{name}"
        given = {**settings, "gpu_memory_utilization": room.room}
        plan = plan_engine(model, on, tp, max_model_len, given, max_utilization=room.room)
        if "gpu_memory_utilization" in plan.settings:
            plan.notes.insert(0, sharing.share_note(room, plan.settings["gpu_memory_utilization"]))
            return plan, False
    plan = EnginePlan()
    if tp is not None:
        plan.settings["tensor_parallel_size"] = tp
    if max_model_len is not None:
        plan.settings["max_model_len"] = max_model_len
    return plan, True


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
    target = _checked_target(
        repo, model, name, force=force, tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len
    )
    name = target.name

    model_ref = resolve_model(model)
    settings = dict(settings or {})
    gpu_name, count = _parse_gpu(gpu)
    room = sharing.gpu_room(repo, name, sharing.engine_gpus(settings, tensor_parallel_size, count), vllm_version)
    left_for_plan = False
    if room.crowded and not {"gpu_memory_utilization", "kv_cache_memory_bytes"} & set(settings):
        plan, left_for_plan = plan_shared_engine(model_ref, gpu, tensor_parallel_size, max_model_len, settings, room)
    else:
        plan = plan_engine(model_ref, gpu, tensor_parallel_size, max_model_len, settings, max_utilization=room.room)
    engine_args = render_engine_args(model_ref, plan, settings, dict(loras or {}), vllm_version)
    config_text = render_config(name, model, engine_args)

    repo.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(repo)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=repo))
    try:
        (staging / ".pid").write_text(str(os.getpid()))
        staged = staging / name
        files = _write_model_files(staged, config_text, engine_args, loras)

        # The repository's other models sit beside the new one (as links) so cross-model checks see them, e.g. the
        # sum of gpu_memory_utilization on a shared GPU. Findings name the staging directory; point them at where
        # the files will be.
        _link_siblings(repo, staging, name)
        next_step: str | None = f"vllm-repo launch {shlex.quote(str(repo))}"
        if left_for_plan:
            # No share written: what sizes every engine of the GPU together, checked on the staged repository.
            note, next_step = _left_for_plan(repo, staging, room, gpu_name, count, tensor_parallel_size, vllm_version)
            plan.notes.insert(0, note)
        diagnostics = [_relocate(d, staging.name) for d in _validate(staged, vllm_version)]
        # A model left for plan --pack is over its GPU's shares until plan sizes them: that is what the note says.
        excused = sharing.SHARING_CODES if left_for_plan else frozenset()
        errors = [d for d in diagnostics if d.severity.value == "error" and d.code not in excused]
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
        next_step=next_step,
    )


def _checked_target(
    repo: Path,
    model: str,
    name: str | None,
    *,
    force: bool,
    tensor_parallel_size: int | None,
    max_model_len: int | None,
) -> Path:
    """The model's directory, ``repo/<name>`` (by default named after ``model``), where the options and what is there
    let init write it (UsageError, InitError)."""
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
    return target


def _write_model_files(
    model_dir: Path, config_text: str, engine_args: dict[str, Any], loras: dict[str, str] | None
) -> list[Path]:
    """The model's files written under ``model_dir``: config.pbtxt, model.json, multi_lora.json with adapters."""
    version_dir = model_dir / VERSION
    version_dir.mkdir(parents=True)
    files = [model_dir / "config.pbtxt", version_dir / "model.json"]
    _write(files[0], config_text)
    _write(files[1], _dump_json(engine_args))
    if loras:
        files.append(version_dir / "multi_lora.json")
        _write(files[-1], _dump_json(loras))
    return files


def _parse_gpu(gpu: str | None) -> tuple[str | None, int | None]:
    if gpu is None:
        return None, None
    from vllm_repo.estimate.fit import parse_gpu

    return parse_gpu(gpu)


def _left_for_plan(
    repo: Path,
    staging: Path,
    room: sharing.GpuRoom,
    gpu: str | None,
    count: int | None,
    tp: int | None,
    vllm_version: str | None,
) -> tuple[str, str | None]:
    """The note for a model written without a share, and the command to run next: plan --pack for the GPU init was
    given (or the project's), where the models fit so."""
    from vllm_repo.estimate import resolve_gpu
    from vllm_repo.estimate.pack_advice import packing_advice
    from vllm_repo.settings import resolve_settings

    project = resolve_settings(repo)
    num_gpus = count or project.num_gpus or tp or 1
    if gpu is None and project.gpu_spec is not None and project.num_gpus is not None:
        gpu, num_gpus = str(project.gpu_spec), project.num_gpus
    if gpu is None:
        return sharing.left_for_plan_note(room, None, None), None
    advice = packing_advice(staging, resolve_gpu(gpu), num_gpus, vllm_version, shown_as=repo)
    why = "it does not start in that" if room.room >= sharing.MIN_SHARE else "that is too little to start in"
    note = sharing.left_for_plan_note(room, gpu, f"{why}; {advice}")
    commands = re.findall(r"`([^`]+)`", advice)
    return note, commands[0] if commands else None


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
