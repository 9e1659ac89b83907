"""The index metadata file (docs/index-format.md; format-version 1): the model and its JSON.

The structures are pydantic dataclasses (field types and errors in ``fields``): frozen, keyed in
JSON by the kebab-case names of docs/index-format.md, checked field by field as they are read.
``IndexMetadata.from_json`` reads the JSON exactly and checks it with ``rules.check_metadata``;
``rules.validate_against_table`` adds the rules that need the table. The model also answers the
questions the build, lookup and expiry code ask: the extract schema of an extract, the
ordering-key fields and their expressions, the index properties with their defaults.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic.dataclasses import dataclass
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import IcebergType, NestedField, PrimitiveType

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import METADATA_COLUMNS, IndexExpression, Reference
from airflow_iceberg_maint.index.metadata.fields import (
    MODEL_CONFIG,
    DataType,
    Expression,
    ExtractSchema,
    Int,
    Items,
    SpecObject,
    StringMap,
    Text,
    UuidText,
    input_error,
    json_key,
    reject,
)
from airflow_iceberg_maint.index.metadata.rules import check_metadata, is_absolute_location
from airflow_iceberg_maint.index.metadata.spec import (
    ALLOW_KEY_SPANNING,
    ALLOW_KEY_SPANNING_DEFAULT,
    BUILD_MEMORY_BUDGET,
    BUILD_MEMORY_BUDGET_DEFAULT,
    COMMIT_NUM_RETRIES,
    COMMIT_NUM_RETRIES_DEFAULT,
    DELETE_AFTER_COMMIT,
    DELETE_AFTER_COMMIT_DEFAULT,
    FORMAT_VERSION,
    INDEX_TYPE_SCALAR,
    PREVIOUS_VERSIONS_MAX,
    PREVIOUS_VERSIONS_MAX_DEFAULT,
    REGION_TARGET_SIZE,
    REGION_TARGET_SIZE_DEFAULT,
)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, config=MODEL_CONFIG)
class IdentityField(SpecObject):
    """Maps a source field (table field or metadata column) to its identity column in the extract schema."""

    source_id: Int
    field_id: Int


@dataclass(frozen=True, config=MODEL_CONFIG)
class StatsField(SpecObject):
    """A stats-only field: ``expr`` over identity columns (by extract field ID), never stored in regions."""

    json_required = ("type",)

    field_id: Int
    type: Text = Field(default="expr-value", kw_only=True)
    data_type: DataType
    expr: Expression

    @field_validator("type")
    @classmethod
    def _expr_value_only(cls, kind: str) -> str:
        if kind != "expr-value":
            raise reject(f"must be 'expr-value' (no partition spec), got {kind!r}")
        return kind


@dataclass(frozen=True, config=MODEL_CONFIG)
class Extract(SpecObject):
    """The index data for one source table snapshot: a tracking file listing region files."""

    extract_id: Int
    source_table_snapshot_id: Int
    extract_schema_id: Int
    timestamp_ms: Int
    tracking_file: Text
    tracking_file_size_in_bytes: Int
    properties: StringMap = Field(default_factory=dict)
    key_id: Text | None = None

    @field_validator("tracking_file_size_in_bytes")
    @classmethod
    def _not_negative(cls, size: int) -> int:
        if size < 0:
            raise reject(f"must not be negative, got {size}")
        return size


@dataclass(frozen=True, config=MODEL_CONFIG)
class MetadataLogEntry(SpecObject):
    metadata_file: Text
    timestamp_ms: Int


@dataclass(frozen=True, config=MODEL_CONFIG)
class EncryptionKey(SpecObject):
    """The table spec's encryption-key structure."""

    key_id: Text
    encrypted_key_metadata: Text
    encrypted_by_id: Text | None = None
    properties: StringMap = Field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class OrderingField:
    """One component of the ordering key, as builders and readers need it.

    ``expression`` reads the extract schema (field IDs of identity columns); ``stats_only`` tells
    whether the value is stored in region files (an identity column) or only in tracking stats.
    """

    field_id: int
    data_type: PrimitiveType
    expression: IndexExpression
    stats_only: bool


@dataclass(frozen=True, config=MODEL_CONFIG, kw_only=True)
class IndexMetadata(SpecObject):
    """One index metadata file. Immutable: updates return a new instance (``dataclasses.replace``).

    The fields are in the order of the JSON object; the optional lists and maps are written only
    when not empty.
    """

    json_required = ("format-version", "index-type")

    format_version: Int = FORMAT_VERSION
    index_uuid: UuidText
    table_uuid: UuidText
    location: Text
    last_updated_ms: Int
    index_type: Text = INDEX_TYPE_SCALAR
    identity_fields: Annotated[tuple[IdentityField, ...], Items]
    schemas: Annotated[tuple[ExtractSchema, ...], Items]
    stats_fields: Annotated[tuple[StatsField, ...], Items] = ()
    ordering_key: Annotated[tuple[Int, ...], Items]
    properties: StringMap = Field(default_factory=dict)
    extracts: Annotated[tuple[Extract, ...], Items] = ()
    metadata_log: Annotated[tuple[MetadataLogEntry, ...], Items] = ()
    encryption_keys: Annotated[tuple[EncryptionKey, ...], Items] = ()

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        # Fields of other drafts (e.g. materialized-fields) change the meaning: refuse, don't drop.
        known = {json_key(f.name) for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known) if isinstance(data, dict) else []
        if unknown:
            raise reject(f"unknown field(s) {', '.join(map(repr, unknown))}")
        return data

    @field_validator("format_version")
    @classmethod
    def _supported_version(cls, version: int) -> int:
        if version != FORMAT_VERSION:
            raise reject(f"must be {FORMAT_VERSION}, got {version}")
        return version

    @field_validator("index_type")
    @classmethod
    def _lower_case(cls, index_type: str) -> str:
        return index_type.lower()

    # JSON

    @classmethod
    def from_json(cls, obj: Any) -> IndexMetadata:
        """Read a parsed index metadata JSON object and check every structural rule."""
        try:
            metadata = _ADAPTER.validate_python(obj, by_alias=True, by_name=False)
        except ValidationError as exc:
            raise input_error(exc, "index metadata") from exc
        check_metadata(metadata)
        return metadata

    def to_json(self) -> dict[str, Any]:
        """The JSON object; optional lists and maps are written only when non-empty."""
        out: dict[str, Any] = _ADAPTER.dump_python(self, mode="json")
        return out

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> IndexMetadata:
        """Parse a metadata file's bytes; errors are prefixed with ``where`` (the file location)."""
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"index metadata {where}: not valid JSON ({exc})") from exc
        try:
            return cls.from_json(obj)
        except InvalidInputError as exc:
            raise InvalidInputError(f"index metadata {where}: {exc}") from exc

    # Accessors

    def schema_by_id(self, schema_id: int) -> Schema:
        for schema in self.schemas:
            if schema.schema_id == schema_id:
                return schema
        raise InvalidInputError(f"schemas: no extract schema with ID {schema_id}")

    def current_schema(self) -> Schema:
        """The most recently added extract schema."""
        return self.schemas[-1]

    def extract_schema(self, extract: Extract) -> Schema:
        return self.schema_by_id(extract.extract_schema_id)

    def source_id_of(self, field_id: int) -> int:
        for f in self.identity_fields:
            if f.field_id == field_id:
                return f.source_id
        raise InvalidInputError(f"identity-fields: no identity column with field-id {field_id}")

    def field_id_of_source(self, source_id: int) -> int | None:
        return next((f.field_id for f in self.identity_fields if f.source_id == source_id), None)

    def index_field_types(self, schema: Schema | None = None) -> dict[int, IcebergType]:
        types: dict[int, IcebergType] = {f.field_id: f.field_type for f in (schema or self.current_schema()).fields}
        types.update((f.field_id, f.data_type) for f in self.stats_fields)
        return types

    def ordering_fields(self, schema: Schema | None = None) -> list[OrderingField]:
        """The ordering-key components in order, typed by ``schema`` (default: the current extract schema)."""
        schema = schema or self.current_schema()
        stats = {f.field_id: f for f in self.stats_fields}
        identity = {f.field_id: f for f in schema.fields}
        fields: list[OrderingField] = []
        for field_id in self.ordering_key:
            if field_id in identity:
                column_type = identity[field_id].field_type
                assert isinstance(column_type, PrimitiveType)
                fields.append(OrderingField(field_id, column_type, Reference(field_id), stats_only=False))
            else:
                s = stats[field_id]
                fields.append(OrderingField(field_id, s.expr.result_type(schema), s.expr, stats_only=True))
        return fields

    def resolve_location(self, path: str) -> str:
        """An absolute location for a path stored in metadata (relative ones are under ``location``)."""
        return path if is_absolute_location(path) else f"{self.location}/{path}"

    def newest_extract(self) -> Extract | None:
        """The extract with the latest ``timestamp-ms`` (the later one in the list on a tie)."""
        newest: Extract | None = None
        for extract in self.extracts:
            if newest is None or extract.timestamp_ms >= newest.timestamp_ms:
                newest = extract
        return newest

    def extracts_for_snapshot(self, snapshot_id: int) -> list[Extract]:
        return [e for e in self.extracts if e.source_table_snapshot_id == snapshot_id]

    # Properties, with the defaults of docs/index-format.md

    def _int_property(self, name: str, default: int, minimum: int) -> int:
        raw = self.properties.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise InvalidInputError(f"properties.{name}: expected an integer >= {minimum}, got {raw!r}")
        return value

    def _bool_property(self, name: str, default: bool) -> bool:
        raw = self.properties.get(name)
        if raw is None:
            return default
        if raw.lower() not in ("true", "false"):
            raise InvalidInputError(f"properties.{name}: expected 'true' or 'false', got {raw!r}")
        return raw.lower() == "true"

    def region_target_size_bytes(self) -> int:
        return self._int_property(REGION_TARGET_SIZE, REGION_TARGET_SIZE_DEFAULT, 1)

    def allow_key_spanning(self) -> bool:
        """Writer option: a hot key may span consecutive region files (readers always handle it)."""
        return self._bool_property(ALLOW_KEY_SPANNING, ALLOW_KEY_SPANNING_DEFAULT)

    def build_memory_budget_bytes(self) -> int:
        """Memory a full build or a region rewrite may hold in entries; past it, sorted runs spill to local disk."""
        return self._int_property(BUILD_MEMORY_BUDGET, BUILD_MEMORY_BUDGET_DEFAULT, 1)

    def previous_versions_max(self) -> int:
        return self._int_property(PREVIOUS_VERSIONS_MAX, PREVIOUS_VERSIONS_MAX_DEFAULT, 0)

    def delete_after_commit(self) -> bool:
        return self._bool_property(DELETE_AFTER_COMMIT, DELETE_AFTER_COMMIT_DEFAULT)

    def commit_num_retries(self) -> int:
        return self._int_property(COMMIT_NUM_RETRIES, COMMIT_NUM_RETRIES_DEFAULT, 0)

    # Updates (each returns a new instance, checked where the update can break a rule)

    def with_extract(self, extract: Extract) -> IndexMetadata:
        updated = dataclasses.replace(self, extracts=(*self.extracts, extract))
        check_metadata(updated)
        return updated

    def without_extracts(self, extract_ids: Iterable[int]) -> IndexMetadata:
        drop = set(extract_ids)
        return dataclasses.replace(self, extracts=tuple(e for e in self.extracts if e.extract_id not in drop))

    def new_extract_id(self) -> int:
        """A random positive 63-bit ID not used by any current extract."""
        used = {e.extract_id for e in self.extracts}
        while True:
            candidate = random.SystemRandom().randrange(1, 2**63)
            if candidate not in used:
                return candidate

    def identity_columns_in(self, table_metadata: TableMetadata, snapshot_id: int) -> list[NestedField]:
        """The identity columns typed as the source fields are in that snapshot's schema."""
        snapshot = table_metadata.snapshot_by_id(snapshot_id)
        if snapshot is None:
            raise InvalidInputError(f"snapshot {snapshot_id}: the table has no such snapshot")
        if snapshot.schema_id is None:
            raise InvalidInputError(f"snapshot {snapshot_id}: has no schema-id, so identity column types are unknown")
        table_schema = table_metadata.schema_by_id(snapshot.schema_id)
        if table_schema is None:
            raise InvalidInputError(f"snapshot {snapshot_id}: schema {snapshot.schema_id} is not in the table metadata")
        names = {f.field_id: f.name for f in self.schemas[0].fields}  # names never change across extract schemas
        fields: list[NestedField] = []
        for f in self.identity_fields:
            source = METADATA_COLUMNS.get(f.source_id) or next(
                (c for c in table_schema.fields if c.field_id == f.source_id), None
            )
            if source is None:
                raise InvalidInputError(
                    f"identity-fields: source field {f.source_id} is not in the schema of snapshot {snapshot_id} "
                    "(dropped): no new extract can be created"
                )
            fields.append(NestedField(f.field_id, names[f.field_id], source.field_type, required=source.required))
        return fields


_ADAPTER: TypeAdapter[IndexMetadata] = TypeAdapter(IndexMetadata)
