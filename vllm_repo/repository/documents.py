"""Loading the files of a model repository into documents that know where each thing is written.

JsonDocument: model.json / multi_lora.json, with the line and column of every top-level key.
PbtxtDocument: config.pbtxt parsed with Triton's own ModelConfig protobuf (vllm_repo.repository.model_config),
with a locator for field lines.
Loading never raises for bad content: the syntax error is kept on the document for a rule to report.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based


@dataclass(frozen=True)
class Span:
    """Where something is written in a file's text: character offsets, end exclusive."""

    start: int
    end: int


@dataclass
class SyntaxProblem:
    message: str
    position: Position | None
    hint: str | None = None  # what to write instead, where the problem has one answer


def read_text(path: Path) -> tuple[str | None, SyntaxProblem | None]:
    """File text, or why it can't be read (binary, not UTF-8, unreadable)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, SyntaxProblem(f"cannot read the file: {exc.strerror or exc}", None)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, SyntaxProblem(f"the file is not UTF-8 text (byte 0x{raw[exc.start]:02x})", Position(line, 1))
    return text, None


def offset_to_position(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return Position(line, column)


# ---------------------------------------------------------------------------------------------------------- JSON


@dataclass
class JsonDocument:
    path: Path
    text: str | None = None
    data: Any = None
    problem: SyntaxProblem | None = None
    key_positions: dict[str, Position] = field(default_factory=dict)
    duplicate_keys: list[tuple[str, Position]] = field(default_factory=list)
    # The key (quotes included) and the value of each top-level key's first occurrence, for fixes that edit the text.
    key_spans: dict[str, tuple[Span, Span]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def position_of(self, key: str) -> Position | None:
        return self.key_positions.get(key)

    @classmethod
    def load(cls, path: Path) -> JsonDocument:
        doc = cls(path)
        doc.text, doc.problem = read_text(path)
        if doc.text is None:
            return doc
        try:
            doc.data = json.loads(doc.text, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            doc.problem = json_problem(doc.text, exc)
            return doc
        except ValueError as exc:  # NaN / Infinity, which JSON does not allow
            doc.problem = SyntaxProblem(f"invalid JSON: {exc}", None)
            return doc
        except RecursionError:
            doc.problem = SyntaxProblem("invalid JSON: nested too deeply", None)
            return doc
        if isinstance(doc.data, dict):
            doc.key_positions, doc.duplicate_keys, doc.key_spans = _top_level_keys(doc.text)
        return doc


def json_problem(text: str, exc: json.JSONDecodeError) -> SyntaxProblem:
    """What a JSON syntax error is, in the words a person would use, and where it is.

    Python's decoder reports where it stopped ("Expecting property name enclosed in double quotes" on the line after
    a trailing comma); the usual causes are recognised from the text around that place instead."""
    pos = min(exc.pos, len(text))
    before = text[:pos].rstrip()
    here = text[pos : pos + 1]
    at = offset_to_position(text, pos)

    def problem(message: str, position: Position | None = at, hint: str | None = None) -> SyntaxProblem:
        return SyntaxProblem(f"invalid JSON: {message}", position, hint)

    if exc.msg.startswith("Invalid control character") and here in "\r\n":
        # A line break inside a string: a string that was never closed on its line. Point at where it starts.
        start = text.rfind('"', 0, pos)
        return problem(
            "a string is not closed before the end of its line",
            offset_to_position(text, max(start, 0)),
            'add the closing " (a line break in a string is \\n)',
        )
    if exc.msg.startswith("Invalid control character"):
        return problem("a control character (a tab?) inside a string", hint="write it escaped, e.g. \\t")
    if before.endswith(",") and here in "}]":
        return problem(
            f"a trailing comma before '{here}'",
            offset_to_position(text, len(before) - 1),
            "remove the comma after the last entry (JSON allows none)",
        )
    if exc.msg.startswith("Expecting") and text.startswith(("//", "/*", "#"), pos):
        return problem("a comment", hint="JSON has no comments: remove it")
    if exc.msg.startswith(("Expecting property name", "Expecting value")) and here == "'":
        return problem("a string in single quotes", hint='JSON strings take double quotes: "..."')
    if exc.msg == "Expecting ',' delimiter":
        return problem(
            "a comma is missing between two entries",
            offset_to_position(text, len(before)),
            "add a comma after the previous value",
        )
    if exc.msg.startswith("Unterminated string"):
        return problem("a string is never closed", hint='add the closing "')
    if exc.msg == "Extra data":
        return problem(
            "more text after the end of the JSON value",
            hint="the file must hold one object, {...}: remove what follows it",
        )
    if exc.msg == "Expecting value" and not text.strip():
        return problem("the file is empty", None, "write one JSON object, {...}")
    if exc.msg == "Expecting value":
        return problem('a value is missing, or is not JSON (true, false, null, a number, a "string", {...}, [...])')
    return problem(exc.msg, Position(exc.lineno, exc.colno))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _top_level_keys(
    text: str,
) -> tuple[dict[str, Position], list[tuple[str, Position]], dict[str, tuple[Span, Span]]]:
    """Positions of the keys of the top-level object of valid JSON text (first occurrence), repeated keys, and the
    spans of each key and its value.

    A small scanner rather than a second parser: the text is already known to be valid JSON, so it only has to
    track nesting depth and strings."""
    positions: dict[str, Position] = {}
    duplicates: list[tuple[str, Position]] = []
    spans: dict[str, tuple[Span, Span]] = {}
    decoder = json.JSONDecoder()
    depth = 0
    i, n = 0, len(text)
    expect_key = False
    while i < n:
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if depth == 1 and expect_key:
                key = json.loads(text[i : end + 1])
                pos = offset_to_position(text, i)
                if key in positions:
                    duplicates.append((key, pos))
                else:
                    positions[key] = pos
                    start = text.index(":", end + 1) + 1
                    while text[start] in " \t\r\n":
                        start += 1
                    spans[key] = (Span(i, end + 1), Span(start, decoder.raw_decode(text, start)[1]))
                expect_key = False
            i = end + 1
            continue
        if ch in "{[":
            depth += 1
            expect_key = depth == 1 and ch == "{"
        elif ch in "}]":
            depth -= 1
        elif ch == "," and depth == 1:
            expect_key = True
        i += 1
    return positions, duplicates, spans


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while True:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i
        i += 1


# ---------------------------------------------------------------------------------------------------- config.pbtxt


_PBTXT_ERROR = re.compile(r"^(\d+):(\d+) : (.*)$", re.S)


@dataclass
class PbtxtDocument:
    path: Path
    text: str | None = None
    config: Any = None  # inference.ModelConfig
    problem: SyntaxProblem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @classmethod
    def load(cls, path: Path) -> PbtxtDocument:
        from google.protobuf import text_format

        doc = cls(path)
        doc.text, doc.problem = read_text(path)
        if doc.text is None:
            return doc
        from vllm_repo.repository.model_config import model_config_pb2

        config = model_config_pb2().ModelConfig()
        try:
            text_format.Parse(doc.text, config)
        except text_format.ParseError as exc:
            doc.problem = _parse_error(str(exc))
            return doc
        except (RecursionError, ValueError, UnicodeError) as exc:
            doc.problem = SyntaxProblem(f"cannot parse the model configuration: {exc}", None)
            return doc
        doc.config = config
        return doc

    def has_field(self, name: str) -> bool:
        return self.config is not None and self.config.HasField(name)

    def find(self, pattern: str, start_line: int = 1) -> Position | None:
        """Where a field is written: the first line at or after start_line matching `pattern` (a regex applied
        to the line with its comment removed)."""
        if self.text is None:
            return None
        regex = re.compile(pattern)
        for number, line in enumerate(self.text.splitlines(), start=1):
            if number < start_line:
                continue
            code = _strip_comment(line)
            match = regex.search(code)
            if match:
                return Position(number, match.start() + 1)
        return None

    def field_position(self, name: str, value: str | None = None, start_line: int = 1) -> Position | None:
        if value is None:
            return self.find(rf"\b{re.escape(name)}\s*:?\s*[\[{{\"'\w-]", start_line)
        return self.find(rf"\b{re.escape(name)}\s*:\s*[\"']?{re.escape(value)}\b", start_line)


def _strip_comment(line: str) -> str:
    # '#' starts a comment unless it is inside a quoted string.
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\":
                continue
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _parse_error(text: str) -> SyntaxProblem:
    match = _PBTXT_ERROR.match(text.strip())
    if not match:
        return SyntaxProblem(text.strip(), None)
    line, column, message = int(match.group(1)), int(match.group(2)), match.group(3).strip()
    # protobuf columns are 0-based in some messages and 1-based in others; never report column 0.
    return SyntaxProblem(message, Position(line, max(column, 1)))
