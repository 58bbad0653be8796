"""validate --fix: the findings that have one right answer carry a Fix, a set of edits to a file's text; this module
applies them without touching anything else in the file (formatting, key order, comments stay) and writes each file
atomically, or shows them as a diff.

A fix is applied only when its file still parses afterwards, and never to a file that does not parse to begin with
(rules give no fix there). Two fixes that would edit the same place are not both applied: the second waits for the
next run.

What runs validate, applies the fixes and validates again is the runner's (runner.fix_paths): this module knows files
and edits, not rules.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

from vllm_repo.repository.documents import JsonDocument, PbtxtDocument, Span


@dataclasses.dataclass(frozen=True)
class TextEdit:
    path: Path
    span: Span
    text: str


@dataclasses.dataclass(frozen=True)
class Move:
    """A file that belongs elsewhere in the model directory (its content is right)."""

    path: Path
    target: Path


@dataclasses.dataclass(frozen=True)
class Fix:
    """What the fix does, in a few words ("write bfloat16"), and the edits that do it (text edits, or one move)."""

    description: str
    edits: tuple[TextEdit, ...] = ()
    move: Move | None = None


def move_file(path: Path, target: Path, description: str) -> Fix | None:
    """Move ``path`` to ``target``, never over an existing file."""
    if not path.is_file() or target.exists() or target.is_symlink():
        return None
    return Fix(description, move=Move(path, target))


def replace_json_value(doc: JsonDocument, key: str, value: Any, description: str) -> Fix | None:
    """Write ``value`` in place of a top-level key's value, as JSON, leaving the rest of the text as it is."""
    spans = doc.key_spans.get(key)
    if spans is None:
        return None
    return Fix(description, (TextEdit(doc.path, spans[1], json.dumps(value, ensure_ascii=False)),))


def rename_json_key(doc: JsonDocument, key: str, new_key: str, description: str) -> Fix | None:
    spans = doc.key_spans.get(key)
    if spans is None or new_key in doc.data:
        return None
    return Fix(description, (TextEdit(doc.path, spans[0], json.dumps(new_key, ensure_ascii=False)),))


def remove_json_keys(doc: JsonDocument, keys: Iterable[str]) -> tuple[TextEdit, ...]:
    """Edits that delete top-level members, with their comma and the space up to the next member, so the rest keeps its
    layout. Members at the end go with the comma that preceded them. Other edits may touch only the members kept."""
    members = sorted(doc.key_spans.items(), key=lambda item: item[1][0].start)
    gone = set(keys) & doc.key_spans.keys()
    edits = []
    for i, (key, (key_span, _)) in enumerate(members):
        if key not in gone:
            continue
        later_kept = next((m for m in members[i + 1 :] if m[0] not in gone), None)
        if later_kept is not None:  # up to the next member's key, whether that one stays or goes
            edits.append(TextEdit(doc.path, Span(key_span.start, members[i + 1][1][0].start), ""))
            continue
        # The trailing run of removed members, as one edit: from the end of the last member kept (its comma goes),
        # or from this key when nothing is kept.
        kept_before = [m for m in members[:i] if m[0] not in gone]
        end = members[-1][1][1].end
        start = kept_before[-1][1][1].end if kept_before else key_span.start
        if not kept_before:
            while end < len(doc.text or "") and (doc.text or "")[end] in " \t\r\n":
                end += 1
        edits.append(TextEdit(doc.path, Span(start, end), ""))
        break
    return tuple(edits)


def replace_pbtxt_field(
    doc: PbtxtDocument, field: str, new: str, description: str, current: str | None = None
) -> Fix | None:
    """Write ``new`` as the value of the first ``field: value`` config.pbtxt has outside comments; with ``current``,
    of the first whose value is that (``name`` also names every input and output)."""
    position = doc.field_position(field, current)
    if position is None or doc.text is None:
        return None
    line_start = sum(len(line) for line in doc.text.splitlines(keepends=True)[: position.line - 1])
    value = _PBTXT_VALUE.match(doc.text, line_start + position.column - 1)
    if value is None:
        return None
    return Fix(description, (TextEdit(doc.path, Span(value.start("value"), value.end("value")), new),))


_PBTXT_VALUE = re.compile(r"\w+\s*:\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|[^\s,}\]#]+)")


# What each fix answers: validate's Diagnostic, upgrade's Migration.
Answered = TypeVar("Answered")


@dataclasses.dataclass
class FixPlan(Generic[Answered]):
    """The new text of every file the fixes change, and which fixes made it into it."""

    texts: dict[Path, tuple[str, str]] = dataclasses.field(default_factory=dict)  # path -> (old, new)
    moves: list[Move] = dataclasses.field(default_factory=list)
    applied: list[tuple[Answered, Fix]] = dataclasses.field(default_factory=list)  # (diagnostic, fix)
    skipped: list[tuple[Answered, Fix, str]] = dataclasses.field(default_factory=list)  # (diagnostic, fix, why)
    # validate --fix's passes over the files (runner.fix_paths), and whether its last left nothing to change.
    passes: int = 0
    converged: bool = False

    def diff(self, display: dict[Path, str] | None = None) -> str:
        import difflib

        out: list[str] = []
        for path, (old, new) in sorted(self.texts.items()):
            name = (display or {}).get(path, str(path)).lstrip("/")  # "a/tmp/x", as git writes an absolute path
            out.extend(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}"))
        for move in self.moves:
            source, target = ((display or {}).get(p, str(p)) for p in (move.path, move.target))
            out.append(f"rename from {source}\nrename to {target}\n")
        return "".join(out)

    @property
    def changes(self) -> bool:
        return bool(self.texts or self.moves)

    def write(self) -> None:
        from vllm_repo.files import write_atomic

        for path, (_, new) in sorted(self.texts.items()):
            write_atomic(path, new)
        for move in self.moves:  # after the text edits, which address files where they are now
            move.target.parent.mkdir(parents=True, exist_ok=True)
            if move.target.exists():  # appeared meanwhile: keep both, the user decides
                continue
            os.rename(move.path, move.target)


def plan(fixes: Iterable[tuple[Answered, Fix]]) -> FixPlan[Answered]:
    """Apply ``fixes`` (each with the diagnostic it answers) to the files' current text, in memory."""
    result: FixPlan[Answered] = FixPlan()
    by_file: dict[Path, list[tuple[Answered, Fix]]] = {}
    for diagnostic, fix in fixes:
        if fix.move is not None:
            if any(m.target == fix.move.target or m.path == fix.move.path for m in result.moves):
                result.skipped.append((diagnostic, fix, "another fix moves the same file; run --fix again"))
            else:
                result.moves.append(fix.move)
                result.applied.append((diagnostic, fix))
            continue
        paths = {edit.path for edit in fix.edits}
        if len(paths) != 1:
            result.skipped.append((diagnostic, fix, "a fix must edit one file"))
            continue
        by_file.setdefault(paths.pop(), []).append((diagnostic, fix))
    for path, wanted in by_file.items():
        old = path.read_text(encoding="utf-8-sig")
        taken: list[Span] = []
        accepted: list[tuple[Answered, Fix]] = []
        for diagnostic, fix in wanted:
            if any(_overlaps(edit.span, span) for edit in fix.edits for span in taken):
                result.skipped.append((diagnostic, fix, "another fix edits the same place; run --fix again"))
                continue
            taken.extend(edit.span for edit in fix.edits)
            accepted.append((diagnostic, fix))
        new = old
        for edit in sorted((e for _, f in accepted for e in f.edits), key=lambda e: e.span.start, reverse=True):
            new = new[: edit.span.start] + edit.text + new[edit.span.end :]
        problem = _parse_problem(path, new)
        if problem:
            result.skipped.extend((d, f, f"the fixed file would not parse ({problem})") for d, f in accepted)
            continue
        if new != old:
            result.texts[path] = (old, new)
            result.applied.extend(accepted)
    return result


def _overlaps(a: Span, b: Span) -> bool:
    return a.start < b.end and b.start < a.end


def _parse_problem(path: Path, text: str) -> str | None:
    if path.suffix == ".json":
        try:
            json.loads(text)
        except ValueError as exc:
            return str(exc)
        return None
    from google.protobuf import text_format

    from vllm_repo.repository.model_config import model_config_pb2

    try:
        text_format.Parse(text, model_config_pb2().ModelConfig())
    except text_format.ParseError as exc:
        return str(exc)
    return None
