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
    to = target.vllm_version
    keys = _KeyMigration(doc, target)
    for key, value in data.items():
        keys.carry(key, value)
    keys.merge_nested()
    edits = [*keys.edits, *remove_json_keys(doc, keys.removed)]
    fix = None
    if edits:
        fix = Fix(
            f"migrate to vLLM {to}: " + ", ".join(c.key for c in keys.changes if c.action != "note"), tuple(edits)
        )
    return Migration(
        doc=doc,
        source=source.vllm_version,
        source_reason=source_reason,
        target=to,
        changes=keys.changes,
        defaults=changed_defaults(data, source, target),
        fix=fix,
    )


@dataclasses.dataclass
class _KeyMigration:
    """The keys of one model.json carried to ``target``: what happens to each, the edits, the keys to remove."""

    doc: JsonDocument
    target: EngineArgsSchema
    changes: list[KeyChange] = dataclasses.field(default_factory=list)
    edits: list[TextEdit] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    # By new key, the old keys that move into its object (merged once every key is read).
    nested: dict[str, list[tuple[str, Replacement]]] = dataclasses.field(default_factory=dict)

    def change(self, key: str, action: str, detail: str) -> None:
        self.changes.append(KeyChange(key, action, detail))

    def remove(self, key: str, detail: str) -> None:
        self.removed.append(key)
        self.change(key, "removed", detail)

    def carry(self, key: str, value: Any) -> None:
        """One key of the file: kept, or carried over by the key history."""
        to = self.target.vllm_version
        if key in self.target.fields:
            note = explain_deprecated_key(key, to)
            if note:
                self.change(key, "note", note)
            return
        found = releases_with(key)
        if not found:
            return  # in no bundled release: a typo, which validate reports with a suggestion
        if all(bundled_release_key(v) > bundled_release_key(to) for v in found):
            self.change(key, "manual", f"exists only from vLLM {found[0]}; remove it to run vLLM {to}")
            return
        replacement = replacement_for(key)
        if replacement is None or replacement.new not in self.target.fields:
            self.remove(key, f"vLLM {to} has no `{key}` and nothing replaces it")
        elif replacement.nest is not None:
            self.nested.setdefault(replacement.new, []).append((key, replacement))
        elif replacement.values is not None:
            self._map_value(key, value, replacement)
        else:
            self._rename(key, value, replacement)

    def _map_value(self, key: str, value: Any, replacement: Replacement) -> None:
        """A key replaced by another whose values the history maps from the old ones."""
        new, data = replacement.new, self.doc.data
        listed, mapped = replacement.carried(value)
        if not listed:
            self.change(key, "manual", f"use `{new}` ({replacement.how}); no rule for {value!r}")
        elif mapped is None:
            self.remove(key, f"{json.dumps(value)} was the default; `{new}` needs none")
        elif new in data:
            self.change(key, "manual", f"becomes `{new}`, which the file already sets")
        else:
            spans = self.doc.key_spans[key]
            self.edits.append(TextEdit(self.doc.path, spans[0], json.dumps(new)))
            self.edits.append(TextEdit(self.doc.path, spans[1], json.dumps(mapped)))
            self.change(key, "rewritten", f'"{new}": {json.dumps(mapped)} ({replacement.how})')

    def _rename(self, key: str, value: Any, replacement: Replacement) -> None:
        """A key renamed (plainly, or in a way the user carries over)."""
        new, data = replacement.new, self.doc.data
        if not replacement.plain:
            self.change(key, "manual", f"use `{new}` ({replacement.how})")
        elif new in data:
            if data[new] == value:
                self.remove(key, f"`{new}` already says the same")
            else:
                self.change(key, "manual", f"renamed `{new}`, which the file already sets differently")
        else:
            self.edits.append(TextEdit(self.doc.path, self.doc.key_spans[key][0], json.dumps(new)))
            self.change(key, "renamed", f"renamed `{new}`")

    def merge_nested(self) -> None:
        """The old keys that move into one new key's object, written as that object."""
        doc, data = self.doc, self.doc.data
        for new, olds in self.nested.items():
            merged, problem = _merged_object(data, new, olds)
            if problem:
                self.changes.extend(KeyChange(old, "manual", problem) for old, _ in olds)
                continue
            if new in data:  # written into the object the file has, the old keys go
                self.edits.append(TextEdit(doc.path, doc.key_spans[new][1], json.dumps(merged)))
                self.removed.extend(old for old, _ in olds)
            else:  # the first old key becomes the new one, the others go
                first = olds[0][0]
                self.edits.append(TextEdit(doc.path, doc.key_spans[first][0], json.dumps(new)))
                self.edits.append(TextEdit(doc.path, doc.key_spans[first][1], json.dumps(merged)))
                self.removed.extend(old for old, _ in olds[1:])
            for old, replacement in olds:
                self.change(old, "moved", f'into `{new}` as "{replacement.nest}"')


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
