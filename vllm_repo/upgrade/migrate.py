"""What a model.json needs for another vLLM release: each key the target release no longer has, carried over to its
replacement where the key history gives one right answer, removed where there is none, and left for the user where
the answer depends on intent; plus the defaults that changed under the keys the file does not set.

Everything here is computed from the bundled schemas and the key history (vllm_repo.schema.history); nothing is
written: the result is a Fix that validate's fix machinery applies.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from vllm_repo.diagnostics.fixes import Fix, TextEdit, remove_json_keys
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.schema.history import Replacement, explain_deprecated_key, releases_with, replacement_for
from vllm_repo.schema.loader import EngineArgsSchema, bundled_release_key, bundled_versions


@dataclasses.dataclass(frozen=True)
class KeyChange:
    """One key's fate: ``action`` is "renamed", "rewritten" (a new key and value), "moved" (into another key's
    object), "removed", or "manual" (left as it is: the user decides) and "note" (kept, with something to know)."""

    key: str
    action: str
    detail: str

    @property
    def needs_user(self) -> bool:
        return self.action == "manual"


@dataclasses.dataclass(frozen=True)
class DefaultChange:
    """A key the file does not set whose default differs between the two releases."""

    key: str
    old: Any
    new: Any

    def text(self) -> str:
        def shown(value: Any) -> str:
            return "unset (vLLM decides at start)" if value is None else json.dumps(value)

        return f"{self.key}: {shown(self.old)} -> {shown(self.new)}"


@dataclasses.dataclass
class Migration:
    """The changes one model.json needs to go from ``source`` to ``target``, and the edit that makes them."""

    doc: JsonDocument
    source: str
    source_reason: str
    target: str
    changes: list[KeyChange]
    defaults: list[DefaultChange]
    fix: Fix | None


def written_for(data: dict[str, Any], target: str) -> tuple[str, str]:
    """The release a model.json was most likely written for: the newest bundled release up to ``target`` that knows
    the most of its keys (every key, for a file that validated there)."""
    known = [key for key in data if releases_with(key)]
    unknown = [key for key in data if key not in known]
    candidates = [v for v in bundled_versions() if bundled_release_key(v) <= bundled_release_key(target)] or list(
        bundled_versions()
    )
    scored = [(sum(v in releases_with(key) for key in known), bundled_release_key(v), v) for v in candidates]
    count, _, best = max(scored)
    # A key no release knows (a typo) says nothing of the release the file was written for, but it is no key the
    # release knows either: the reason names it rather than claim "every key".
    nowhere = f"; {', '.join(repr(k) for k in unknown)} no release knows" if unknown else ""
    if count == len(known):
        every = "every other key" if unknown else "every key"
        return best, f"the newest release that knows {every} in the file{nowhere}"
    return best, f"the release that knows the most of its keys ({count} of {len(known)}){nowhere}"


def plan_migration(
    doc: JsonDocument, source: EngineArgsSchema, target: EngineArgsSchema, source_reason: str = ""
) -> Migration:
    """The migration of one parsed model.json (a JSON object without repeated keys) from ``source`` to ``target``."""
    data: dict[str, Any] = doc.data
    changes: list[KeyChange] = []
    edits: list[TextEdit] = []
    removed: list[str] = []
    nested: dict[str, list[tuple[str, Replacement]]] = {}
    to = target.vllm_version
    for key, value in data.items():
        if key in target.fields:
            note = explain_deprecated_key(key, to)
            if note:
                changes.append(KeyChange(key, "note", note))
            continue
        found = releases_with(key)
        if not found:
            continue  # in no bundled release: a typo, which validate reports with a suggestion
        if all(bundled_release_key(v) > bundled_release_key(to) for v in found):
            changes.append(KeyChange(key, "manual", f"exists only from vLLM {found[0]}; remove it to run vLLM {to}"))
            continue
        replacement = replacement_for(key)
        if replacement is None or replacement.new not in target.fields:
            removed.append(key)
            changes.append(KeyChange(key, "removed", f"vLLM {to} has no `{key}` and nothing replaces it"))
            continue
        new = replacement.new
        if replacement.nest is not None:
            nested.setdefault(new, []).append((key, replacement))
            continue
        if replacement.values is not None:
            listed, mapped = replacement.carried(value)
            if not listed:
                changes.append(KeyChange(key, "manual", f"use `{new}` ({replacement.how}); no rule for {value!r}"))
            elif mapped is None:
                removed.append(key)
                changes.append(KeyChange(key, "removed", f"{json.dumps(value)} was the default; `{new}` needs none"))
            elif new in data:
                changes.append(KeyChange(key, "manual", f"becomes `{new}`, which the file already sets"))
            else:
                spans = doc.key_spans[key]
                edits.append(TextEdit(doc.path, spans[0], json.dumps(new)))
                edits.append(TextEdit(doc.path, spans[1], json.dumps(mapped)))
                changes.append(KeyChange(key, "rewritten", f'"{new}": {json.dumps(mapped)} ({replacement.how})'))
            continue
        if not replacement.plain:
            changes.append(KeyChange(key, "manual", f"use `{new}` ({replacement.how})"))
        elif new in data:
            if data[new] == value:
                removed.append(key)
                changes.append(KeyChange(key, "removed", f"`{new}` already says the same"))
            else:
                changes.append(KeyChange(key, "manual", f"renamed `{new}`, which the file already sets differently"))
        else:
            edits.append(TextEdit(doc.path, doc.key_spans[key][0], json.dumps(new)))
            changes.append(KeyChange(key, "renamed", f"renamed `{new}`"))
    for new, olds in nested.items():
        merged, problem = _merged_object(data, new, olds)
        if problem:
            changes.extend(KeyChange(old, "manual", problem) for old, _ in olds)
            continue
        if new in data:  # written into the object the file has, the old keys go
            edits.append(TextEdit(doc.path, doc.key_spans[new][1], json.dumps(merged)))
            removed.extend(old for old, _ in olds)
        else:  # the first old key becomes the new one, the others go
            first = olds[0][0]
            edits.append(TextEdit(doc.path, doc.key_spans[first][0], json.dumps(new)))
            edits.append(TextEdit(doc.path, doc.key_spans[first][1], json.dumps(merged)))
            removed.extend(old for old, _ in olds[1:])
        for old, replacement in olds:
            changes.append(KeyChange(old, "moved", f'into `{new}` as "{replacement.nest}"'))
    edits.extend(remove_json_keys(doc, removed))
    fix = None
    if edits:
        fix = Fix(f"migrate to vLLM {to}: " + ", ".join(c.key for c in changes if c.action != "note"), tuple(edits))
    return Migration(
        doc=doc,
        source=source.vllm_version,
        source_reason=source_reason,
        target=to,
        changes=changes,
        defaults=changed_defaults(data, source, target),
        fix=fix,
    )


def _merged_object(
    data: dict[str, Any], new: str, olds: list[tuple[str, Replacement]]
) -> tuple[dict[str, Any] | None, str | None]:
    """The object ``new`` takes with the old keys' values in it, or why it can't be built without a choice."""
    existing = data.get(new, {})
    if isinstance(existing, str):  # a config object given as a JSON string, as on vLLM's command line
        try:
            existing = json.loads(existing)
        except ValueError:
            return None, f"`{new}` is a string that is not a JSON object: move the value into it by hand"
    if not isinstance(existing, dict):
        return None, f"`{new}` is not an object: move the value into it by hand"
    merged = dict(existing)
    for old, replacement in olds:
        for name, value in (*replacement.beside, (replacement.nest, data[old])):
            if name in merged and merged[name] != value:
                return None, f'`{new}` already sets "{name}" to {json.dumps(merged[name])}: choose one by hand'
            merged[name] = value
    return merged, None


def changed_defaults(data: dict[str, Any], source: EngineArgsSchema, target: EngineArgsSchema) -> list[DefaultChange]:
    """Keys both releases have, the file does not set, whose default differs: what changes without a line changed."""
    if source.vllm_version == target.vllm_version:
        return []
    out = []
    for key in sorted(source.fields.keys() & target.fields.keys() - data.keys()):
        old, new = source.fields[key].default, target.fields[key].default
        if old != new and not _same_meaning(old, new):
            out.append(DefaultChange(key, old, new))
    return out


def _same_meaning(a: Any, b: Any) -> bool:
    """Unset and empty mean the same to vLLM: several config objects' defaults moved from None to {} or ""."""
    empty: tuple[object, ...] = (None, {}, [], "")
    return a in empty and b in empty
