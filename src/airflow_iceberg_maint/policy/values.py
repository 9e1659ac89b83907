"""Typed values from loosely typed input: operator arguments (strings once Jinja renders them) and
the entries of definition files. A value that cannot be coerced is an error naming it."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_maint.errors import InvalidInputError

_NONE = ("", "none", "null")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def is_none(value: Any) -> bool:
    """None, or a string that renders as none (empty, "none", "null")."""
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE)


def optional_str(value: Any, name: str) -> str | None:
    if is_none(value):
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"argument {name}: expected a string, got {value!r}")
    return value.strip()


def boolean(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidInputError(f"argument {name}: expected true or false, got {value!r}")


def optional_number(value: Any, name: str) -> float | None:
    if is_none(value):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise InvalidInputError(f"argument {name}: expected a number, got {value!r}") from None
