"""The rules of docs/index-format.md: what makes an index metadata file valid, alone and against its table.

Every error is an ``InvalidInputError`` that names the field (S7).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    PrimitiveType,
    TimestampNanoType,
    TimestampType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.metadata.expressions import (
    FORBIDDEN_COLUMNS,
    METADATA_COLUMNS,
    is_orderable,
)
from airflow_iceberg_maint.index.metadata.spec import INDEX_TYPE_SCALAR, MAX_FIELD_ID, MAX_STATS_FIELD_ID

if TYPE_CHECKING:
    from airflow_iceberg_maint.index.metadata.model import IndexMetadata


def check_metadata(m: IndexMetadata) -> None:
    """Every rule of docs/index-format.md ("Rules checked on every read and write") that needs only
    this file. Raises ``InvalidInputError`` naming the field."""
    if m.index_type.lower() != INDEX_TYPE_SCALAR:
        raise InvalidInputError(f"index-type: {m.index_type!r} is not supported (expected 'scalar')")
    if not is_absolute_location(m.location):
        raise InvalidInputError(f"location: {m.location!r} must be an absolute location")
    _check_identity_fields(m)
    _check_schemas(m)
    _check_stats_fields(m)
    _check_ordering_key(m)
    _check_extracts(m)
    key_ids = [k.key_id for k in m.encryption_keys]
    if len(set(key_ids)) != len(key_ids):
        raise InvalidInputError(f"encryption-keys: key-id values must be unique, got {key_ids}")


def _check_identity_fields(m: IndexMetadata) -> None:
    if not m.identity_fields:
        raise InvalidInputError("identity-fields: must not be empty")
    sources, ids = set(), set()
    for i, f in enumerate(m.identity_fields):
        where = f"identity-fields[{i}]"
        if f.source_id in FORBIDDEN_COLUMNS:
            raise InvalidInputError(
                f"{where}.source-id: metadata column {FORBIDDEN_COLUMNS[f.source_id]!r} ({f.source_id}) "
                "cannot be indexed"
            )
        if f.source_id > MAX_FIELD_ID and f.source_id not in METADATA_COLUMNS:
            raise InvalidInputError(f"{where}.source-id: {f.source_id} is reserved but not a known metadata column")
        if not 0 <= f.field_id <= MAX_FIELD_ID:
            raise InvalidInputError(f"{where}.field-id: {f.field_id} is outside [0, {MAX_FIELD_ID}]")
        if f.source_id in sources:
            raise InvalidInputError(f"{where}.source-id: {f.source_id} appears more than once")
        if f.field_id in ids:
            raise InvalidInputError(f"{where}.field-id: {f.field_id} appears more than once")
        sources.add(f.source_id)
        ids.add(f.field_id)


def _check_schemas(m: IndexMetadata) -> None:
    if not m.schemas:
        raise InvalidInputError("schemas: must not be empty")
    wanted = [f.field_id for f in m.identity_fields]
    seen: set[int] = set()
    for i, schema in enumerate(m.schemas):
        where = f"schemas[{i}]"
        if schema.schema_id in seen:
            raise InvalidInputError(f"{where}.schema-id: {schema.schema_id} appears more than once")
        seen.add(schema.schema_id)
        got = [f.field_id for f in schema.fields]
        if got != wanted:
            raise InvalidInputError(
                f"{where}: fields must be the identity columns {wanted} in identity-fields order, got {got}"
            )
        for f in schema.fields:
            source = m.source_id_of(f.field_id)
            if not isinstance(f.field_type, PrimitiveType):
                raise InvalidInputError(f"{where}: identity column {f.field_id} is not primitive: {f.field_type}")
            if source in METADATA_COLUMNS:
                meta = METADATA_COLUMNS[source]
                if f.field_type != meta.field_type or (f.required and not meta.required):
                    raise InvalidInputError(
                        f"{where}: identity column {f.field_id} of {meta.name} must be "
                        f"{'required' if meta.required else 'optional'} {meta.field_type}"
                    )
        if i:
            check_schema_evolution(m.schemas[i - 1], schema, where)


def check_schema_evolution(previous: Schema, schema: Schema, where: str) -> None:
    for old, new in zip(previous.fields, schema.fields, strict=True):
        if old.name != new.name:
            raise InvalidInputError(f"{where}: field {new.field_id} renamed from {old.name!r} to {new.name!r}")
        if not is_valid_promotion(old.field_type, new.field_type):
            raise InvalidInputError(
                f"{where}: field {new.field_id} type {old.field_type} -> {new.field_type} is not a valid promotion"
            )
        if new.required and not old.required:
            raise InvalidInputError(f"{where}: field {new.field_id} changed from optional to required")


def _check_stats_fields(m: IndexMetadata) -> None:
    schema = m.current_schema()
    identity_ids = {f.field_id for f in m.identity_fields}
    seen: set[int] = set()
    for i, f in enumerate(m.stats_fields):
        where = f"stats-fields[{i}]"
        if f.field_id in identity_ids or f.field_id in seen:
            raise InvalidInputError(f"{where}.field-id: {f.field_id} is not unique among index field IDs")
        if not 0 <= f.field_id <= MAX_STATS_FIELD_ID:
            raise InvalidInputError(
                f"{where}.field-id: {f.field_id} is outside [0, {MAX_STATS_FIELD_ID}] (no room for its stats IDs)"
            )
        seen.add(f.field_id)
        stray = [ref for ref in f.expr.source_ids if ref not in identity_ids]
        if stray:
            raise InvalidInputError(f"{where}.expr: references {stray}, which are not identity columns")
        try:
            result = f.expr.result_type(schema)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}.expr: {exc}") from exc
        if result != f.data_type:
            raise InvalidInputError(f"{where}.data-type: {f.data_type} is not the expression's type {result}")


def _check_ordering_key(m: IndexMetadata) -> None:
    if not m.ordering_key:
        raise InvalidInputError("ordering-key: must not be empty")
    if len(set(m.ordering_key)) != len(m.ordering_key):
        raise InvalidInputError(f"ordering-key: {list(m.ordering_key)} repeats a field")
    types = m.index_field_types()
    for i, field_id in enumerate(m.ordering_key):
        where = f"ordering-key[{i}]"
        if field_id not in types:
            raise InvalidInputError(f"{where}: {field_id} is not an extract schema field nor a stats-only field")
        if not is_orderable(types[field_id]):
            raise InvalidInputError(f"{where}: field {field_id} has type {types[field_id]}, which has no order")
        if not 0 <= field_id <= MAX_STATS_FIELD_ID:
            raise InvalidInputError(f"{where}: field {field_id} is too large to carry content stats")


def _check_extracts(m: IndexMetadata) -> None:
    schema_ids = {s.schema_id for s in m.schemas}
    key_ids = {k.key_id for k in m.encryption_keys}
    seen: set[int] = set()
    for i, e in enumerate(m.extracts):
        where = f"extracts[{i}]"
        if e.extract_id in seen:
            raise InvalidInputError(f"{where}.extract-id: {e.extract_id} appears more than once")
        seen.add(e.extract_id)
        if e.extract_schema_id not in schema_ids:
            raise InvalidInputError(f"{where}.extract-schema-id: no schema with ID {e.extract_schema_id}")
        if e.key_id is not None and e.key_id not in key_ids:
            raise InvalidInputError(f"{where}.key-id: {e.key_id!r} is not in encryption-keys")


def validate_against_table(m: IndexMetadata, table_metadata: TableMetadata) -> None:
    """Check the rules that need the table: its UUID, and each extract's identity column types.

    Extracts whose source snapshot the table no longer has cannot be checked (nor used).
    """
    check_metadata(m)
    if uuid.UUID(m.table_uuid) != uuid.UUID(str(table_metadata.table_uuid)):
        raise InvalidInputError(f"table-uuid: {m.table_uuid} is not the table's UUID {table_metadata.table_uuid}")
    for i, extract in enumerate(m.extracts):
        if table_metadata.snapshot_by_id(extract.source_table_snapshot_id) is None:
            continue
        expected = m.identity_columns_in(table_metadata, extract.source_table_snapshot_id)
        actual = m.schema_by_id(extract.extract_schema_id)
        for want, got in zip(expected, actual.fields, strict=True):
            if got.field_type != want.field_type or (got.required and not want.required):
                raise InvalidInputError(
                    f"extracts[{i}].extract-schema-id: identity column {got.field_id} is "
                    f"{'required' if got.required else 'optional'} {got.field_type}, but its source in snapshot "
                    f"{extract.source_table_snapshot_id} is {'required' if want.required else 'optional'} "
                    f"{want.field_type}"
                )


def check_properties(m: IndexMetadata) -> None:
    """Parse every known property, so a bad value is refused when it is set (S7)."""
    m.region_target_size_bytes()
    m.allow_key_spanning()
    m.build_memory_budget_bytes()
    m.previous_versions_max()
    m.delete_after_commit()
    m.commit_num_retries()


def is_absolute_location(location: str) -> bool:
    """A URI with a scheme, or an absolute local path (tables on local disks may lack ``file:``)."""
    return location.startswith("/") or bool(Uri.parse(location).scheme)


def is_valid_promotion(old: IcebergType, new: IcebergType) -> bool:
    """Whether ``old`` may become ``new`` under the table spec's type promotion rules (or is equal)."""
    if old == new:
        return True
    if isinstance(old, IntegerType):
        return isinstance(new, LongType)
    if isinstance(old, FloatType):
        return isinstance(new, DoubleType)
    if isinstance(old, DecimalType):
        return isinstance(new, DecimalType) and new.scale == old.scale and new.precision >= old.precision
    if isinstance(old, DateType):
        return isinstance(new, (TimestampType, TimestampNanoType))
    return False


def check_index_name(name: str) -> str:
    """An index name is one safe path component: letters, digits, ``_``, ``-`` and ``.`` (not leading)."""
    if not name or name.startswith(".") or not all(ch.isascii() and (ch.isalnum() or ch in "_-.") for ch in name):
        raise InvalidInputError(f"index name {name!r}: use letters, digits, '_', '-' and '.', not starting with '.'")
    return name
