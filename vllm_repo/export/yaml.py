"""A small, deterministic YAML writer for manifests: mappings in insertion order, lists, strings, numbers, booleans
and None. Strings that YAML would read as something else are written as JSON strings (valid YAML); multi-line strings
as literal blocks. PyYAML is not a dependency, and a writer this size keeps golden files byte-stable."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

# Plain scalars that YAML 1.1 or 1.2 resolvers could read as a bool, null or number.
_SPECIAL = re.compile(
    r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL|~|"
    r"[-+]?(?:\d[\d_]*)?(?:\.\d*)?(?:[eE][-+]?\d+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|0x[0-9a-fA-F]+|0o[0-7]+|"
    r"\d+(?::[0-5]?\d)+(?:\.\d*)?)$"
)
_PLAIN = re.compile(r"^[A-Za-z0-9/_.$(][A-Za-z0-9 /_.,$()=+@-]*(?::[A-Za-z0-9/_.$()=+@-][A-Za-z0-9 /_.,$()=+@-]*)*$")
INDENT = "  "


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, str):
        if value and _PLAIN.match(value) and not _SPECIAL.match(value) and value == value.strip():
            return value
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"no YAML form for {type(value).__name__}")


def _block(text: str, level: int) -> str:
    """A literal block scalar (|, or |- without the final newline)."""
    chomp = "" if text.endswith("\n") and not text.endswith("\n\n") else "-"
    body = text[:-1] if chomp == "" else text
    indicator = "2" if body[:1] == " " else ""  # a first line that starts with a space needs the indentation stated
    pad = INDENT * level
    lines = [pad + line if line else "" for line in body.split("\n")]
    return f"|{indicator}{chomp}\n" + "\n".join(lines)


def _is_block(value: Any) -> bool:
    return (
        isinstance(value, str)
        and "\n" in value.rstrip("\n")
        and not any(line != line.rstrip() for line in value.split("\n"))
        and "\t" not in value
    )


def _lines(value: Any, level: int) -> list[str]:
    pad = INDENT * level
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            k = scalar(str(key))
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{k}:")
                # Lists under a key sit at the key's level, as kubectl writes them.
                out += _lines(item, level if isinstance(item, list) else level + 1)
            elif _is_block(item):
                out.append(f"{pad}{k}: {_block(item, level + 1)}")
            else:
                out.append(f"{pad}{k}: {_inline(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)) and item:
                inner = _lines(item, level + 1)
                out.append(f"{pad}- {inner[0][len(pad) + len(INDENT) :]}")
                out += inner[1:]
            elif _is_block(item):
                out.append(f"{pad}- {_block(item, level + 1)}")
            else:
                out.append(f"{pad}- {_inline(item)}")
    else:
        out.append(pad + _inline(value))
    return out


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"  # only empty ones come here
    if isinstance(value, list):
        return "[]"
    return scalar(value)


def dump(value: Any, comments: Sequence[str] = ()) -> str:
    """One YAML document, with ``comments`` as # lines above it."""
    head = [f"# {line}".rstrip() for text in comments for line in text.split("\n")]
    return "\n".join([*head, *_lines(value, 0)]) + "\n"


def dump_all(documents: Sequence[tuple[Any, Sequence[str]]]) -> str:
    """Several documents, each with its comments, separated by ---."""
    return "".join(f"---\n{dump(doc, comments)}" for doc, comments in documents)
