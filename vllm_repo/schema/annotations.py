"""What a Python annotation allows in model.json: the JSON types, and the closed set of values when there is one.

An interpreter of typing objects (``Optional[int]``, ``Literal[...]``, enums, dataclasses, pydantic models,
``X | None``) and of annotations left as source text (vLLM names some types only under ``TYPE_CHECKING``, so they
can't be evaluated and are read by name). It imports nothing of vLLM and only the standard library:
:mod:`vllm_repo.schema.generate` runs it inside the interpreter that has vLLM, where nothing else is sure to be.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import enum
import typing
from collections.abc import Callable
from typing import Any

from vllm_repo.schema.json_types import JSON_TYPES, json_type

ALL_JSON_TYPES = list(JSON_TYPES)
_ORDER = {t: i for i, t in enumerate(ALL_JSON_TYPES)}


def sorted_types(types: set[str]) -> list[str]:
    """The types in the order of JSON_TYPES (the schema files list them so)."""
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
    if tp is Any or tp is typing.Any:
        return TypeInfo(types=set(ALL_JSON_TYPES))
    if tp is None or tp is type(None):
        return TypeInfo(types={"null"})
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return type_info(args[0])
    if (
        origin is typing.Union
        or (origin is not None and type(tp).__name__ == "UnionType")
        or type(tp).__name__ == "UnionType"
    ):
        return _union_type_info(args)
    if origin is typing.Literal:
        return _literal_type_info(args)
    if isinstance(tp, typing.TypeVar):
        return _type_var_info(tp)
    if isinstance(tp, typing.ForwardRef):
        return type_info_from_source(tp.__forward_arg__, {})
    if isinstance(tp, str):
        return type_info_from_source(tp, {})
    if origin is not None:
        return _generic_type_info(origin)
    return _class_type_info(tp)


def _union_type_info(members: tuple[Any, ...]) -> TypeInfo:
    info = TypeInfo()
    for member in members:
        info.merge(type_info(member))
    return info


def _literal_type_info(values: tuple[Any, ...]) -> TypeInfo:
    info = TypeInfo()
    for value in values:
        if isinstance(value, enum.Enum):
            value = enum_json_value(value)
        info.types.add(json_type(value))
        if value is not None:
            info.literals.append(value)
    return info


def _type_var_info(tp: typing.TypeVar) -> TypeInfo:
    """A TypeVar allows what its bound or its constraints allow; unbounded, anything."""
    if tp.__bound__ is not None:
        return type_info(tp.__bound__)
    if tp.__constraints__:
        return _union_type_info(tp.__constraints__)
    return TypeInfo(types=set(ALL_JSON_TYPES))


def _generic_type_info(origin: Any) -> TypeInfo:
    """A parameterised annotation (``list[int]``, ``Mapping[str, X]``, ``type[X]``), by its origin."""
    import collections.abc as cabc

    if origin is type:
        return TypeInfo(unknown=True)  # a class object: cannot be written in JSON
    if isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset)):
        return TypeInfo(types={"array"})
    if origin in (cabc.Sequence, cabc.MutableSequence, cabc.Set, cabc.MutableSet, cabc.Iterable, cabc.Collection):
        return TypeInfo(types={"array"})
    if origin in (dict, cabc.Mapping, cabc.MutableMapping) or _is_mapping_class(origin):
        return TypeInfo(types={"object"})
    if origin is cabc.Callable:
        return TypeInfo(unknown=True)
    return type_info(origin)


def _class_type_info(tp: Any) -> TypeInfo:
    """A plain annotation: a builtin, an enum, a subclass of one, a mapping class, or something JSON can't hold."""
    if tp is bool:
        return TypeInfo(types={"boolean"})
    if tp is int:
        return TypeInfo(types={"integer"})
    if tp is float:
        return TypeInfo(types={"number"})
    if tp is str or tp is bytes:
        return TypeInfo(types={"string"}, open_string=True)
    if tp in (list, tuple, set, frozenset):
        return TypeInfo(types={"array"})
    if tp is dict:
        return TypeInfo(types={"object"})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [enum_json_value(member) for member in tp]
        return TypeInfo(types={json_type(value) for value in values}, literals=values)
    if isinstance(tp, type) and issubclass(tp, bool):
        return TypeInfo(types={"boolean"})
    if isinstance(tp, type) and issubclass(tp, int):
        return TypeInfo(types={"integer"})
    if isinstance(tp, type) and issubclass(tp, float):
        return TypeInfo(types={"number"})
    if isinstance(tp, type) and issubclass(tp, str):
        return TypeInfo(types={"string"}, open_string=True)
    if _is_mapping_class(tp):
        return TypeInfo(types={"object"})
    if isinstance(tp, type) and tp.__module__.startswith("torch") and tp.__name__ == "dtype":
        return TypeInfo(types={"string"}, open_string=True)  # torch.dtype: given by name ("bfloat16") in JSON
    if tp is Callable or typing.get_origin(tp) is Callable:
        return TypeInfo(unknown=True)
    if isinstance(tp, type) and tp.__module__ in ("pathlib", "os"):
        return TypeInfo(types={"string"}, open_string=True)
    return TypeInfo(unknown=True)


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


def field_type_info(field: dataclasses.Field, module_ns: dict[str, Any]) -> TypeInfo:
    """A dataclass field's annotation mapped; a string annotation is evaluated in ``module_ns`` (the namespace of the
    module that defines the dataclass), and read as source text where that fails."""
    annotation = field.type
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, module_ns)
        except Exception:
            return type_info_from_source(annotation, module_ns)
    return type_info(annotation)
