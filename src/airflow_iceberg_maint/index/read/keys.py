"""The key columns of an index, and the values a lookup gives for them: parsed from text, checked per probe."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import METADATA_COLUMNS
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.read.key_scan import Probe, check_probe


def parse_lookup_value(text: str, column: NestedField, option: str = "--eq") -> Any:
    """A command-line value as the key column's type (ISO 8601 for dates and timestamps); errors name ``option``."""
    kind = column.field_type
    try:
        if isinstance(kind, (IntegerType, LongType)):
            bits = 32 if isinstance(kind, IntegerType) else 64
            number = int(text)
            if not -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
                raise ValueError(f"out of range for a {bits}-bit integer")
            return number
        if isinstance(kind, (FloatType, DoubleType)):
            return float(text)
        if isinstance(kind, DecimalType):
            return Decimal(text)
        if isinstance(kind, BooleanType):
            if text.lower() not in ("true", "false"):
                raise ValueError("expected true or false")
            return text.lower() == "true"
        if isinstance(kind, DateType):
            return date.fromisoformat(text)
        if isinstance(kind, (TimestampType, TimestamptzType)):
            value = datetime.fromisoformat(text.replace("Z", "+00:00"))
            if isinstance(kind, TimestamptzType):
                return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
            return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
        if isinstance(kind, UUIDType):
            return uuid.UUID(text)
        if isinstance(kind, StringType):
            return text
    except (ValueError, InvalidOperation) as exc:
        raise InvalidInputError(f"{option} {text!r}: not a {kind} value for column {column.name!r} ({exc})") from exc
    raise InvalidInputError(f"{option} {text!r}: lookups on {kind} column {column.name!r} are not supported")


def key_columns(metadata: IndexMetadata) -> list[NestedField]:
    """The table columns a lookup gives values for: identity columns the ordering key reads, in order."""
    schema = metadata.current_schema()
    seen: list[int] = []
    for ordering in metadata.ordering_fields(schema):
        seen.extend(i for i in ordering.expression.source_ids if i not in seen)
    by_id = {f.field_id: f for f in schema.fields}
    return [by_id[i] for i in seen if metadata.source_id_of(i) not in METADATA_COLUMNS]


def checked_probes(metadata: IndexMetadata, name: str, probes: Iterable[Probe]) -> list[Probe]:
    """The distinct probes, each with one value per key column (NaN refused)."""
    keys = key_columns(metadata)
    unique = list(dict.fromkeys(check_probe(tuple(p)) for p in probes))
    if not unique or any(len(p) != len(keys) for p in unique):
        raise InvalidInputError(
            f"lookup values: index {name!r} needs one value per key column ({', '.join(f.name for f in keys)})"
        )
    return unique
