"""JSON's value types as the schema files name them. Kept free of imports: the generator runs in another
interpreter (the one with vLLM), where nothing but the standard library is sure to be installed."""

from __future__ import annotations

from typing import Any

JSON_TYPES = ("boolean", "integer", "number", "string", "object", "array", "null")


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value, as the schema's `types` lists them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def accepts(types: list[str], value: Any) -> bool:
    """Whether a model.json value has one of the JSON types a field takes."""
    if not types or "any" in types:
        return True
    actual = json_type(value)
    # JSON has one number type: an integer is a valid float (gpu_memory_utilization: 1).
    return actual in types or (actual == "integer" and "number" in types)
