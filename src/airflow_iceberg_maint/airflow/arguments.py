"""Typed values from operator arguments, which arrive as strings when they are Jinja-rendered.

``"{{ params.dry_run }}"`` renders to ``"True"`` unless the DAG renders native objects, so
each argument is coerced here, and a value that cannot be coerced is an error naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_iceberg_maint.errors import InvalidInputError

_NONE = ("", "none", "null")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _is_none(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE)


def optional_str(value: Any, name: str) -> str | None:
    if _is_none(value):
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
    if _is_none(value):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise InvalidInputError(f"argument {name}: expected a number, got {value!r}") from None


def positive_int(value: Any, name: str) -> int:
    number = optional_number(value, name)
    if number is None or number < 1 or number != int(number):
        raise InvalidInputError(f"argument {name}: expected a whole number >= 1, got {value!r}")
    return int(number)


def optional_datetime(value: Any, name: str) -> datetime | None:
    if _is_none(value):
        return None
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"argument {name}: expected an ISO 8601 timestamp, got {value!r}") from None
    if moment.tzinfo is None:
        raise InvalidInputError(f"argument {name}: timestamp {value!r} needs a time zone (use UTC)")
    return moment


def mapping(value: Any, name: str) -> dict[str, str]:
    """A mapping given as a dict, a JSON object, or ``a=b,c=d``."""
    if _is_none(value):
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    text = str(value).strip()
    if text.startswith("{"):
        try:
            return mapping(json.loads(text), name)
        except json.JSONDecodeError:
            raise InvalidInputError(f"argument {name}: not a JSON object: {text!r}") from None
    result: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = pair.partition("=")
        if not eq or not key.strip() or not val.strip():
            raise InvalidInputError(f"argument {name}: expected key=value pairs separated by commas, got {text!r}")
        result[key.strip()] = val.strip()
    return result
