"""What several rule families share: the model.json documents the vLLM checks read, and message helpers."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vllm_repo.repository import ModelDirectory, VersionDirectory
from vllm_repo.repository.documents import JsonDocument, PbtxtDocument
from vllm_repo.schema.loader import json_type
from vllm_repo.validate.rules.registry import Finding


def vllm_engine_args(model: ModelDirectory) -> Iterator[tuple[VersionDirectory, JsonDocument]]:
    """Every model.json the vLLM checks apply to (none for a model of another backend), readable or not."""
    if model.uses_vllm_backend:
        yield from model.engine_args_documents()


def engine_args_objects(model: ModelDirectory) -> Iterator[JsonDocument]:
    """The model.json files of :func:`vllm_engine_args` that hold a JSON object (the others are VR301's)."""
    for _, doc in vllm_engine_args(model):
        if doc.ok and isinstance(doc.data, dict):
            yield doc


def engine_args_and_config(model: ModelDirectory) -> tuple[JsonDocument, dict[str, Any], PbtxtDocument] | None:
    """(model.json document, its data, the parsed config.pbtxt document), or None when either is unusable."""
    doc = model.checked_engine_args()
    cfg = model.config
    if doc is None or cfg is None or cfg.config is None:
        return None
    return doc, doc.data, cfg


def not_one_json_object(doc: JsonDocument, hint: str, example: str) -> Iterator[Finding]:
    """The Finding for a JSON file that does not parse, or holds something other than one object (``example`` shows
    what it should hold)."""
    if doc.problem is not None:
        yield Finding(doc.path, doc.problem.message, doc.problem.position, hint=doc.problem.hint or hint)
    elif not isinstance(doc.data, dict):
        yield Finding(doc.path, f"{doc.path.name} holds a JSON {json_type(doc.data)}, not an object", hint=example)


def fixes() -> Any:
    """vllm_repo.diagnostics.fixes, imported when a finding has a fix to offer: a clean run never pays for it."""
    from vllm_repo.diagnostics import fixes as module

    return module


def path_exists(path: str | Path) -> bool:
    """Whether a path from a file exists on this machine; False for one no file system accepts."""
    try:
        return Path(path).expanduser().exists()
    except (OSError, RuntimeError, ValueError):  # ~unknown_user, a name longer than the OS allows, a NUL byte
        return False


_SWITCH = re.compile(r"^(enable|disable|no|use|skip)_")


def inverts_switch(key: str, other: str) -> bool:
    """Whether ``other`` is ``key`` with its switch turned the other way (disable_x / enable_x): a did-you-mean that
    names it, followed as written, would mean the opposite."""
    return other != key and _SWITCH.sub("", other) == _SWITCH.sub("", key)


def did_you_mean(word: str, candidates: Iterable[object], cutoff: float = 0.75) -> str | None:
    import difflib

    names = [str(c) for c in candidates]
    lowered = {n.lower(): n for n in names}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    if not match:
        match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
        match = [lowered[m] for m in match]
    return match[0] if match else None


def count_text(n: int) -> str:
    """An integer for a message. Products of values from the files (tensor x pipeline parallel size) can outgrow
    what str() converts (4300 digits); those are only ever shown as a power of ten."""
    return str(n) if n.bit_length() < 1000 else f"about 10^{int(n.bit_length() * 0.30103)}"
