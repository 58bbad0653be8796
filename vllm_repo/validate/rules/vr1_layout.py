"""VR1xx: the model repository's layout as Triton and the vLLM backend read it."""

from __future__ import annotations

import re
from collections.abc import Iterator

from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import CONFIG_FILE, ENGINE_ARGS_FILE, LORA_FILE, ModelDirectory, is_version_name
from vllm_repo.validate.rules.common import did_you_mean, fixes
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule

# Files people commit into model directories that Triton ignores and nobody meant to ship.
JUNK_FILES = {".DS_Store", "Thumbs.db", "desktop.ini"}
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@rule("VR101", "missing-config", Severity.ERROR)
def missing_config(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """The model directory has no config.pbtxt.

    Triton reads the backend that runs a model, and the model's settings, from <model>/config.pbtxt; it cannot load a
    model directory without one. A file with a similar name (config.pbxt, llm.pbtxt) is named in the hint.

    Example::

        # llm/config.pbxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    if model.config_path.is_file():
        return
    look_alikes = [
        p.name
        for p in model.entries
        if p.is_file() and (p.suffix in (".pbtxt", ".pbxt") or p.name.startswith("config"))
    ]
    hint = (
        f"rename {look_alikes[0]} to {CONFIG_FILE}"
        if look_alikes
        else f'add {CONFIG_FILE} with at least `backend: "vllm"` (vllm-repo init writes a complete one)'
    )
    yield Finding(
        model.path, f"model directory '{model.name}' has no {CONFIG_FILE}; Triton will not load it", hint=hint
    )


@rule("VR102", "no-version-directory", Severity.ERROR)
def no_version_directory(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model has no numeric version directory.

    Triton serves a model's versions from subdirectories named with integers (1/, 2/, ...). With none, it has no
    version to load and the model fails to load; a model.json in a directory such as v1/ is not seen. An ensemble
    needs one too, empty.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/v1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    if model.versions:
        return
    if not model.uses_vllm_backend:
        if model.config is not None and model.config.config is not None:  # another backend's: Triton's own rule
            what = "an empty directory" if model.is_ensemble else "a directory with the model's files"
            yield Finding(
                model.path,
                f"'{model.name}' has no version directory; Triton needs <model>/1/",
                hint=f"create {model.name}/1/, {what}",
            )
        return
    odd = [p.name for p in model.entries if p.is_dir() and (p / ENGINE_ARGS_FILE).is_file()]
    if odd:
        yield Finding(
            model.path / odd[0],
            f"version directory '{odd[0]}' is not a number; Triton ignores it and "
            f"finds no version of '{model.name}' to load",
            hint="rename it to 1 (versions are 1, 2, ...)",
        )
    elif model.config is not None:
        yield Finding(
            model.path,
            f"'{model.name}' has no version directory; Triton needs <model>/1/",
            hint=f"create {model.name}/1/{ENGINE_ARGS_FILE}",
        )


@rule("VR103", "engine-args-misplaced", Severity.ERROR)
def engine_args_misplaced(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """model.json or multi_lora.json beside config.pbtxt instead of in the version directory.

    The vLLM backend reads <model>/<version>/model.json and, with LoRA, <model>/<version>/multi_lora.json. A copy
    beside config.pbtxt is never read: only the version directory's file counts. validate still checks the misplaced
    file's contents.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/
    """
    for name in (ENGINE_ARGS_FILE, LORA_FILE):
        path = model.path / name
        if path.is_file() and model.uses_vllm_backend:
            target = model.versions[-1].path.name if model.versions else "1"
            yield Finding(
                path,
                f"{name} sits beside {CONFIG_FILE}; the vLLM backend reads "
                f"<model>/<version>/{name} and will not see this one",
                hint=f"move it to {model.name}/{target}/{name}",
                fix=fixes().move_file(path, model.path / target / name, f"move it to {model.name}/{target}/{name}"),
            )


@rule("VR104", "missing-engine-args", Severity.ERROR)
def missing_engine_args(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A version directory of a vLLM model has no model.json.

    The backend reads its engine arguments from model.json in the version directory it loads, and fails to
    initialize the model when that file is missing. A lone other JSON file there, or one with a similar name, is
    named in the hint as the file to rename.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/engine_args.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    if not model.uses_vllm_backend:
        return
    for version in model.versions:
        if (version.path / ENGINE_ARGS_FILE).is_file():
            continue
        jsons = [p.name for p in sorted(version.path.glob("*.json")) if p.name != LORA_FILE]
        near = did_you_mean(ENGINE_ARGS_FILE, jsons, cutoff=0.6) or (jsons[0] if len(jsons) == 1 else None)
        # A fix only for a misspelling of the name itself (models.json, Model.json), not any lone JSON file.
        misspelled = did_you_mean(ENGINE_ARGS_FILE, jsons, cutoff=0.85)
        hint = (
            f"rename {near} to {ENGINE_ARGS_FILE}"
            if near
            else f'add {ENGINE_ARGS_FILE} with the vLLM engine arguments, at least {{"model": "<HF id or path>"}}'
        )
        yield Finding(
            version.path,
            f"version directory {model.name}/{version.path.name} has no {ENGINE_ARGS_FILE}; "
            f"the vLLM backend fails to initialize",
            hint=hint,
            fix=fixes().move_file(
                version.path / misspelled, version.path / ENGINE_ARGS_FILE, f"rename {misspelled} to {ENGINE_ARGS_FILE}"
            )
            if misspelled
            else None,
        )


@rule("VR105", "stray-file", Severity.WARNING)
def stray_files(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """Files in a model directory that nobody meant to ship (.DS_Store, compiled Python, editor leftovers).

    Triton and the backend never read .DS_Store, Thumbs.db, desktop.ini, compiled Python (*.pyc, __pycache__), vim
    swap files (*.swp) or backups ending in ~; they are left behind by the operating system, Python or an editor and
    committed by accident.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/.DS_Store
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    places = [model.path] + [v.path for v in model.versions]
    for place in places:
        try:
            children = sorted(place.iterdir())
        except OSError:
            continue
        for child in children:
            if (
                child.name in JUNK_FILES
                or child.suffix in (".pyc", ".swp")
                or child.name.endswith("~")
                or child.name == "__pycache__"
            ):
                yield Finding(
                    child,
                    f"'{child.name}' does not belong in a model repository",
                    hint="delete it and add it to .gitignore",
                )


@rule("VR106", "backend-model-py", Severity.WARNING)
def backend_model_py(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model.py inside a model that uses the vllm backend (the backend's own model.py is used instead).

    For a Python-based backend such as vllm, Triton runs the model.py of the backend's own directory (for example
    /opt/tritonserver/backends/vllm/model.py), not a model.py in the model's version directory. If the file is your
    own Python model, the model needs backend: "python".

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1/model.py
        class TritonPythonModel:
            def execute(self, requests):
                return []
    """
    if model.backend != "vllm":
        return
    for version in model.versions:
        path = version.path / "model.py"
        if path.is_file():
            yield Finding(
                path,
                'a model.py in the version directory of a `backend: "vllm"` model is ignored: '
                "Triton runs the backend's model.py",
                hint='delete it, or set backend: "python" if it is your own backend',
            )


@rule("VR107", "unsafe-model-name", Severity.WARNING)
def unsafe_model_name(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model directory name that breaks URLs and shell commands (spaces, special characters).

    Clients call a model by its directory name, in URLs (/v2/models/<name>/generate) and on command lines, so a name
    with spaces or characters such as ( ) & * has to be percent-encoded or quoted wherever it is used. Letters and
    digits, and '.', '_' or '-' after the first character, are always safe.

    Example::

        # qwen2.5-0.5b(instruct)/config.pbtxt
        backend: "vllm"
        # qwen2.5-0.5b(instruct)/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
    """
    if not SAFE_NAME.match(model.name):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model.name).strip("_") or "model"
        yield Finding(
            model.path,
            f"model name '{model.name}' is not URL- and shell-safe; clients address it as /v2/models/{model.name}/...",
            hint=f"rename the directory, e.g. to '{safe}'",
        )


@rule("VR108", "non-numeric-directory", Severity.INFO)
def non_numeric_directory(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A subdirectory of a model that is not a version (Triton skips it).

    Triton loads versions only from subdirectories named with integers and skips every other subdirectory. That is
    fine for files model.json points at (local weights, a chat template); it is reported so that a version directory
    with a wrong name (1_backup, v2) does not go unnoticed.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct"}
        # llm/1_backup/
    """
    for child in model.entries:
        reported_by_vr102 = not model.versions and (child / ENGINE_ARGS_FILE).is_file()
        if child.is_dir() and not is_version_name(child.name) and child.name != "__pycache__" and not reported_by_vr102:
            yield Finding(child, f"'{child.name}' is not a version directory; Triton ignores it")
