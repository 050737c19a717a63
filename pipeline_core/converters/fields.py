"""Typed access to raw row fields; every failure is a RowError naming the field and what it expects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.sample import Role
from pipeline_core.errors import RowError

_JSON_NAMES = {
    str: "string",
    list: "list",
    dict: "object",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def json_type(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def as_row(row: Any, field: str | None = None) -> Mapping[str, Any]:
    if not isinstance(row, Mapping):
        where = field or "row"
        raise RowError("wrong_type", f"{where} must be a JSON object, got {json_type(row)}", field)
    return row


def require(row: Mapping[str, Any], key: str, field: str) -> Any:
    """The value of row[key]; a missing key or null is `missing_field`, listing what is there."""
    value = row.get(key)
    if value is None:
        available = sorted(k for k, v in row.items() if v is not None)
        raise RowError(
            "missing_field",
            f"missing field {field!r}; available keys: {available}. Is the column/tag mapping right for this dataset?",
            field,
        )
    return value


def as_str(value: Any, field: str) -> str:
    return _typed(value, str, field)


def as_list(value: Any, field: str) -> list[Any]:
    return _typed(value, list, field)


def as_dict(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RowError("wrong_type", f"{field} must be an object, got {json_type(value)}", field)
    return value


def required_str(row: Mapping[str, Any], key: str, field: str | None = None) -> str:
    return as_str(require(row, key, field or key), field or key)


def optional_str(row: Mapping[str, Any], key: str, field: str | None = None) -> str | None:
    value = row.get(key)
    return None if value is None else as_str(value, field or key)


def required_list(row: Mapping[str, Any], key: str, field: str | None = None) -> list[Any]:
    return as_list(require(row, key, field or key), field or key)


def optional_list(row: Mapping[str, Any], key: str, field: str | None = None) -> list[Any]:
    value = row.get(key)
    return [] if value is None else as_list(value, field or key)


def _typed(value: Any, kind: type, field: str) -> Any:
    if not isinstance(value, kind):
        expected = _JSON_NAMES[kind]
        raise RowError("wrong_type", f"{field} must be a {expected}, got {json_type(value)}", field)
    return value


def required_turns(row: Mapping[str, Any], key: str, field: str | None = None) -> list[Any]:
    """A non-empty list of turns; an empty one is `empty_conversation`."""
    turns = required_list(row, key, field)
    if not turns:
        where = field or key
        raise RowError("empty_conversation", f"{where} is empty; expected at least one turn", where)
    return turns


def lookup_role(tag: str, roles: Mapping[str, Role], field: str) -> Role:
    """Map a source role name to a standard role; unknown names list the accepted ones."""
    role = roles.get(tag)
    if role is None:
        raise RowError(
            "unknown_role",
            f"unknown role {tag!r} in {field}; expected one of {'/'.join(roles)}",
            field,
        )
    return role
