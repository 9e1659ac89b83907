"""Typed values from operator arguments, which arrive as strings when they are Jinja-rendered.

``"{{ params.dry_run }}"`` renders to ``"True"`` unless the DAG renders native objects, so
each argument is coerced here, and a value that cannot be coerced is an error naming it.

The cutoff of an orphan run started from Airflow has a floor of 1 day (as Iceberg's Spark
procedure): younger files may belong to a write still in progress. Going under it takes
``allow_recent_files``. The floor lives here, in the Airflow layer, because Airflow runs are
unattended and a form can be mistyped; the engine and the command line keep 0 meaning now.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import XComArg

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import parse_equivalence_map
from airflow_iceberg_maint.policy.policies import RECENT_FILES_FLOOR_DAYS
from airflow_iceberg_maint.policy.values import boolean as boolean
from airflow_iceberg_maint.policy.values import is_none
from airflow_iceberg_maint.policy.values import optional_number as optional_number
from airflow_iceberg_maint.policy.values import optional_str as optional_str

RECENT_FILES_FLOOR = timedelta(days=RECENT_FILES_FLOOR_DAYS)
#: A list of tables as operators take it: a list, a comma-separated string, or another task's output.
TableList = list[str] | str | XComArg
# An absolute cutoff planned on one worker (policy olderThanDays: 1) is checked on another
# worker's clock; this much skew between them must not fail the run.
CLOCK_SKEW = timedelta(seconds=60)
_RECENT_RISK = "files younger than 1 day may belong to writes in progress"


def positive_int(value: Any, name: str) -> int:
    number = optional_number(value, name)
    if number is None or number < 1 or number != int(number):
        raise InvalidInputError(f"argument {name}: expected a whole number >= 1, got {value!r}")
    return int(number)


def optional_datetime(value: Any, name: str) -> datetime | None:
    if is_none(value):
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
    if is_none(value):
        return {}
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    text = str(value).strip()
    if text.startswith("{"):
        try:
            return mapping(json.loads(text), name)
        except json.JSONDecodeError:
            raise InvalidInputError(f"argument {name}: not a JSON object: {text!r}") from None
    try:
        return parse_equivalence_map(text)
    except InvalidInputError as exc:
        raise InvalidInputError(f"argument {name}: {exc}") from None


def older_than_days(value: Any, allow_recent_files: bool, now: datetime) -> float | None:
    """The ``older_than_days`` argument: at least 1, or at least 0 with ``allow_recent_files``.

    A smaller value is refused as typed, never raised to the floor: -1 is an error, not 0.
    """
    days = optional_number(value, "older_than_days")
    if days is None:
        return None
    if not math.isfinite(days):
        raise InvalidInputError(f"argument older_than_days: expected a finite number of days, got {value!r}")
    if allow_recent_files and days < 0:
        raise InvalidInputError(
            f"argument older_than_days: expected a number of days >= 0, got {days:g} "
            "(a negative age is a future cutoff)"
        )
    if not allow_recent_files and days < RECENT_FILES_FLOOR_DAYS:
        raise InvalidInputError(
            f"argument older_than_days: expected a number of days >= 1, got {days:g} "
            f"({_RECENT_RISK}; set allow_recent_files to allow down to 0)"
        )
    try:
        now - timedelta(days=days)
    except OverflowError:
        raise InvalidInputError(f"argument older_than_days: {days:g} days before now is out of range") from None
    return days


def older_than(value: Any, allow_recent_files: bool, now: datetime) -> datetime | None:
    """The ``older_than`` argument: at least 1 day before ``now`` unless ``allow_recent_files``."""
    moment = optional_datetime(value, "older_than")
    if moment is not None and not allow_recent_files and moment > now - RECENT_FILES_FLOOR + CLOCK_SKEW:
        raise InvalidInputError(
            f"argument older_than: {moment.isoformat()} is less than 1 day before now "
            f"({now.isoformat(timespec='seconds')}; {_RECENT_RISK}; set allow_recent_files to allow it)"
        )
    return moment
