"""schema.annotations: what a Python annotation allows in model.json (the JSON types, and the closed choices)."""

from __future__ import annotations

import ast
import dataclasses
import enum
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypedDict, TypeVar, Union

import pytest
from pydantic import BaseModel

from vllm_repo.schema import annotations
from vllm_repo.schema.annotations import field_type_info, sorted_types, type_info, type_info_from_source
from vllm_repo.schema.loader import JSON_TYPES


@dataclasses.dataclass
class _Config:
    size: int = 1


class _Model(BaseModel):
    name: str = "x"


class _Options(TypedDict):
    a: int


class _Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@pytest.mark.parametrize(
    ("annotation", "types"),
    [
        (Optional[int], {"integer", "null"}),  # noqa: UP045 (the spelling under test)
        (int | None, {"integer", "null"}),
        (Union[str, list[str], None], {"string", "array", "null"}),  # noqa: UP007
        (bool, {"boolean"}),
        (float, {"number"}),
        (dict[str, Any], {"object"}),
        (_Config, {"object"}),
        (_Model | None, {"object", "null"}),
        (_Options, {"object"}),
        (list[int], {"array"}),
        (tuple[int, ...], {"array"}),
        (set[str], {"array"}),
        (Any, set(JSON_TYPES)),
    ],
)
def test_annotations_map_to_json_types(annotation: Any, types: set[str]) -> None:
    assert type_info(annotation).types == types


def test_literal_is_a_closed_choice_unless_any_string_is_allowed() -> None:
    closed = type_info(Literal["auto", "half"])
    assert closed.types == {"string"} and closed.literals == ["auto", "half"] and not closed.open_string
    opened = type_info(Union[Literal["auto", "half"], str])  # noqa: UP007
    assert opened.open_string and opened.literals == ["auto", "half"]
    numbers = type_info(Literal[1, 2] | None)
    assert numbers.types == {"integer", "null"} and numbers.literals == [1, 2]


class _Mode(str, enum.Enum):
    FAST = "fast"
    SLOW = "slow"


def test_enums_give_what_model_json_writes_as_choices() -> None:
    # vLLM turns a string into a plain Enum by member name; a str enum member is its value.
    assert type_info(_Color).literals == ["RED", "BLUE"]
    assert type_info(_Mode).literals == ["fast", "slow"]
    assert type_info(_Mode | None).types == {"string", "null"}


def test_class_objects_are_not_json() -> None:
    info = type_info(Union[str, type[_Config]])  # noqa: UP007
    assert info.types == {"string"} and info.unknown


@pytest.mark.parametrize(
    ("source", "types"),
    [
        ("Optional[int]", {"integer", "null"}),
        ("int | None", {"integer", "null"}),
        ("Literal['a', 'b']", {"string"}),
        ("list[str] | None", {"array", "null"}),
        ("'SpeculativeConfig' | dict | None", {"object", "null"}),
        ("Union[float, 'torch.dtype']", {"number", "string"}),
    ],
)
def test_annotations_given_as_text_map_without_their_namespace(source: str, types: set[str]) -> None:
    assert type_info_from_source(source, {}).types == types


def test_annotation_text_resolves_names_in_the_module_namespace() -> None:
    info = type_info_from_source("Mode | None", {"Mode": Literal["fast", "slow"]})
    assert info.types == {"string", "null"} and info.literals == ["fast", "slow"]


_Bound = TypeVar("_Bound", bound=int)
_Either = TypeVar("_Either", int, str)
_Free = TypeVar("_Free")


def test_wrappers_and_type_variables_map_to_what_they_stand_for() -> None:
    assert type_info(Annotated[int, "doc"]).types == {"integer"}
    assert type_info(_Bound).types == {"integer"}
    assert type_info(_Either).types == {"integer", "string"}
    assert type_info(_Free).types == set(JSON_TYPES)
    assert type_info(typing.ForwardRef("int | None")).types == {"integer", "null"}
    assert type_info("list[str]").types == {"array"}


def test_what_json_cannot_carry_is_unknown() -> None:
    assert type_info(Callable[[int], int]).unknown
    assert type_info(object).unknown and not type_info(object).types
    assert type_info_from_source("def", {}).unknown  # not an expression
    assert type_info_from_source("Callable[[int], int]", {}).unknown


def test_names_of_unknown_classes_are_read_by_their_spelling() -> None:
    assert type_info_from_source("CompilationConfig", {}).types == {"object"}
    assert type_info_from_source("torch.dtype | None", {}).types == {"string", "null"}
    assert type_info_from_source("SomethingElse", {}).unknown


@dataclasses.dataclass
class _Fields:
    plain: int = 0
    evaluated: str = "x"
    unresolvable: str = "y"


def test_a_string_annotation_is_evaluated_in_its_module_and_read_as_text_when_that_fails() -> None:
    plain, evaluated, unresolvable = dataclasses.fields(_Fields)
    assert field_type_info(plain, {}).types == {"integer"}  # this module's annotations are strings
    evaluated.type = "Mode | None"
    namespace = {"Mode": Literal["fast", "slow"]}
    info = field_type_info(evaluated, namespace)
    assert info.types == {"string", "null"} and info.literals == ["fast", "slow"]
    unresolvable.type = "Optional[NotDefinedHere]"  # defined only under TYPE_CHECKING in vLLM's module
    assert field_type_info(unresolvable, {"Optional": Optional}).types == {"null"}
    assert field_type_info(unresolvable, {"Optional": Optional}).unknown


def test_types_are_listed_in_the_schema_order() -> None:
    assert sorted_types({"null", "string", "integer"}) == ["integer", "string", "null"]
    assert sorted_types(set(JSON_TYPES)) == list(JSON_TYPES)


def test_the_interpreter_imports_only_the_standard_library() -> None:
    # The generator runs it in the interpreter that has vLLM, where nothing but the standard library is sure to be.
    tree = ast.parse(Path(annotations.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    outside = {name for name in imported if name.split(".")[0] not in sys.stdlib_module_names}
    assert outside == {"vllm_repo.schema.json_types"}
