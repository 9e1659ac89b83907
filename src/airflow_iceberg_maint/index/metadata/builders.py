"""Builders of index metadata: a new index, a new extract, and the extract schema for a snapshot."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    NestedField,
    PrimitiveType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import (
    FILE_COLUMN_ID,
    METADATA_COLUMNS,
    POS_COLUMN_ID,
    Apply,
    Reference,
    parse_expression_text,
)
from airflow_iceberg_maint.index.metadata.model import Extract, IdentityField, IndexMetadata, StatsField, now_ms
from airflow_iceberg_maint.index.metadata.rules import (
    check_index_name,
    check_metadata,
    check_properties,
    check_schema_evolution,
    is_absolute_location,
    is_valid_promotion,
)
from airflow_iceberg_maint.index.metadata.spec import INDEX_PATH_PROPERTY


def with_extract_schema_for(
    metadata: IndexMetadata, table_metadata: TableMetadata, snapshot_id: int
) -> tuple[IndexMetadata, int]:
    """The extract schema ID to use for an extract of this snapshot, adding a schema if none matches.

    Call it inside the commit update (``IndexStore.commit``), so a retry re-derives it on the
    latest metadata. Stats-only ``data-type`` values follow promotions of their inputs.
    """
    fields = metadata.identity_columns_in(table_metadata, snapshot_id)
    for schema in metadata.schemas:
        if list(schema.fields) == fields:
            return metadata, schema.schema_id
    new_schema = Schema(*fields, schema_id=max(s.schema_id for s in metadata.schemas) + 1)
    check_schema_evolution(metadata.current_schema(), new_schema, f"snapshot {snapshot_id}")
    stats = []
    for f in metadata.stats_fields:
        promoted = f.expr.result_type(new_schema)
        if not is_valid_promotion(f.data_type, promoted):
            raise InvalidInputError(
                f"stats-fields: field {f.field_id} type {f.data_type} -> {promoted} is not a valid promotion"
            )
        stats.append(replace(f, data_type=promoted))
    updated = replace(metadata, schemas=(*metadata.schemas, new_schema), stats_fields=tuple(stats))
    check_metadata(updated)
    return updated, new_schema.schema_id


def new_extract(
    metadata: IndexMetadata,
    source_table_snapshot_id: int,
    extract_schema_id: int,
    tracking_file: str,
    tracking_file_size_in_bytes: int,
    properties: Mapping[str, str] | None = None,
) -> Extract:
    """A new extract with a fresh random ID and the current time."""
    return Extract(
        extract_id=metadata.new_extract_id(),
        source_table_snapshot_id=source_table_snapshot_id,
        extract_schema_id=extract_schema_id,
        timestamp_ms=now_ms(),
        tracking_file=tracking_file,
        tracking_file_size_in_bytes=tracking_file_size_in_bytes,
        properties=dict(properties or {}),
    )


def index_root(table_metadata: TableMetadata) -> str:
    """Where the table's indexes live: the table property ``write.index.path``, else ``<table-location>/index``."""
    path = table_metadata.properties.get(INDEX_PATH_PROPERTY)
    if path is None:
        return f"{table_metadata.location.rstrip('/')}/index"
    if not is_absolute_location(path):
        raise InvalidInputError(f"table property {INDEX_PATH_PROPERTY}: {path!r} must be an absolute location")
    return path.rstrip("/")


def index_location(table_metadata: TableMetadata, name: str) -> str:
    """``<index root>/<name>``: where the index's metadata and data files live."""
    return f"{index_root(table_metadata)}/{name}"


def new_index_metadata(
    table: Table,
    name: str,
    ordering: list[str],
    identity_columns: list[str],
    with_row_location: bool,
    properties: dict[str, str],
) -> IndexMetadata:
    """The metadata of a new index (no extracts yet), as ``index create`` defines it.

    ``ordering`` holds CLI expressions (``id``, ``bucket(16, id)``, ...). A bare column becomes an
    ordering-key reference to its identity column; a transform becomes a stats-only field. Identity
    columns are the columns the ordering reads, then ``identity_columns``, then ``_file`` and
    ``_pos`` when ``with_row_location``. Table columns keep their field ID as identity field-id;
    metadata columns and stats-only fields take fresh IDs above the table's last column ID.
    """
    check_index_name(name)
    if not ordering:
        raise InvalidInputError("ordering: at least one expression is required")
    schema = table.schema()
    expressions = [parse_expression_text(text, schema) for text in ordering]

    sources: list[int] = []
    for expression in expressions:
        sources.extend(s for s in expression.source_ids if s not in sources)
    by_name = {f.name: f for f in schema.fields}
    for column in identity_columns:
        if column not in by_name:
            raise InvalidInputError(f"identity column {column!r}: the table has no top-level column of that name")
        if not isinstance(by_name[column].field_type, PrimitiveType):
            raise InvalidInputError(f"identity column {column!r}: type {by_name[column].field_type} is not primitive")
        if by_name[column].field_id not in sources:
            sources.append(by_name[column].field_id)

    next_id = max([table.metadata.last_column_id, *sources]) + 1
    identity: list[IdentityField] = []
    columns: list[NestedField] = []
    for source_id in sources:
        source = next(f for f in schema.fields if f.field_id == source_id)
        identity.append(IdentityField(source_id, source_id))
        columns.append(NestedField(source_id, source.name, source.field_type, required=source.required))
    if with_row_location:
        for source_id in (FILE_COLUMN_ID, POS_COLUMN_ID):
            meta = METADATA_COLUMNS[source_id]
            identity.append(IdentityField(source_id, next_id))
            columns.append(NestedField(next_id, meta.name, meta.field_type, required=meta.required))
            next_id += 1
    extract_schema = Schema(*columns, schema_id=0)

    ordering_key: list[int] = []
    stats: list[StatsField] = []
    for expression in expressions:
        if isinstance(expression, Reference):
            ordering_key.append(expression.field_id)  # table field IDs double as identity field IDs
            continue
        assert isinstance(expression, Apply)
        stats.append(StatsField(next_id, expression.result_type(extract_schema), expression))
        ordering_key.append(next_id)
        next_id += 1

    metadata = IndexMetadata(
        index_uuid=str(uuid.uuid4()),
        table_uuid=str(table.metadata.table_uuid),
        location=index_location(table.metadata, name),
        last_updated_ms=now_ms(),
        identity_fields=tuple(identity),
        schemas=(extract_schema,),
        ordering_key=tuple(ordering_key),
        stats_fields=tuple(stats),
        properties=dict(properties),
    )
    check_metadata(metadata)
    check_properties(metadata)
    return metadata
