"""The index metadata file (docs/index-format.md; format-version 1): the model and its JSON.

``IndexMetadata.from_json`` reads the JSON exactly and checks it with ``rules.check_metadata``;
``rules.validate_against_table`` adds the rules that need the table. The model also answers the
questions the build, lookup and expiry code ask: the extract schema of an extract, the
ordering-key fields and their expressions, the index properties with their defaults.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    IcebergType,
    NestedField,
    PrimitiveType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import (
    METADATA_COLUMNS,
    IndexExpression,
    Reference,
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

_TOP_LEVEL_KEYS = frozenset(
    {
        "format-version",
        "index-uuid",
        "table-uuid",
        "location",
        "last-updated-ms",
        "index-type",
        "identity-fields",
        "schemas",
        "stats-fields",
        "ordering-key",
        "properties",
        "extracts",
        "metadata-log",
        "encryption-keys",
    }
)


def now_ms() -> int:
    return int(time.time() * 1000)


# JSON reading helpers: each names the field it reads (S7).


def _get(obj: Mapping[str, Any], key: str, where: str, required: bool = True) -> Any:
    if key not in obj:
        if required:
            raise InvalidInputError(f"{where}: required field {key!r} is missing")
        return None
    return obj[key]


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInputError(f"{where}: expected an integer, got {value!r}")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _uuid(value: Any, where: str) -> str:
    text = _str(value, where)
    try:
        uuid.UUID(text)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {text!r} is not a UUID") from exc
    return text


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []  # a missing optional list reads as empty
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: expected a list, got {value!r}")
    return value


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: expected an object, got {value!r}")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidInputError(f"{where}: expected a map of strings to strings, got {value!r}")
    return dict(value)


def _type_from_json(value: Any, where: str) -> PrimitiveType:
    try:
        parsed = NestedField.model_validate({"id": 1, "name": "x", "type": value, "required": False}).field_type
    except Exception as exc:
        raise InvalidInputError(f"{where}: {value!r} is not an Iceberg type") from exc
    if not isinstance(parsed, PrimitiveType):
        raise InvalidInputError(f"{where}: {value!r} is not a primitive type")
    return parsed


def _type_to_json(value: IcebergType) -> Any:
    return json.loads(NestedField(1, "x", value, required=False).model_dump_json())["type"]


def _schema_from_json(value: Any, where: str) -> Schema:
    obj = _obj(value, where)
    if obj.get("type") != "struct":
        raise InvalidInputError(f"{where}.type: expected 'struct'")
    _int(_get(obj, "schema-id", where), f"{where}.schema-id")
    try:
        return Schema.model_validate(obj)
    except Exception as exc:
        raise InvalidInputError(f"{where}: not a valid Iceberg schema ({exc})") from exc


def _schema_to_json(schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(schema.model_dump_json())
    if not out.get("identifier-field-ids"):
        out.pop("identifier-field-ids", None)
    return out


@dataclass(frozen=True)
class IdentityField:
    """Maps a source field (table field or metadata column) to its identity column in the extract schema."""

    source_id: int
    field_id: int

    @classmethod
    def from_json(cls, obj: Any, where: str) -> IdentityField:
        o = _obj(obj, where)
        return cls(
            _int(_get(o, "source-id", where), f"{where}.source-id"),
            _int(_get(o, "field-id", where), f"{where}.field-id"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"source-id": self.source_id, "field-id": self.field_id}


@dataclass(frozen=True)
class StatsField:
    """A stats-only field: ``expr`` over identity columns (by extract field ID), never stored in regions."""

    field_id: int
    data_type: PrimitiveType
    expr: IndexExpression
    type: str = "expr-value"

    @classmethod
    def from_json(cls, obj: Any, where: str) -> StatsField:
        o = _obj(obj, where)
        kind = _str(_get(o, "type", where), f"{where}.type")
        if kind != "expr-value":
            raise InvalidInputError(f"{where}.type: must be 'expr-value' (no partition spec), got {kind!r}")
        try:
            expr = IndexExpression.from_json(_get(o, "expr", where))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{where}.expr: {exc}") from exc
        return cls(
            _int(_get(o, "field-id", where), f"{where}.field-id"),
            _type_from_json(_get(o, "data-type", where), f"{where}.data-type"),
            expr,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "field-id": self.field_id,
            "type": self.type,
            "data-type": _type_to_json(self.data_type),
            "expr": self.expr.to_json(),
        }


@dataclass(frozen=True)
class Extract:
    """The index data for one source table snapshot: a tracking file listing region files."""

    extract_id: int
    source_table_snapshot_id: int
    extract_schema_id: int
    timestamp_ms: int
    tracking_file: str
    tracking_file_size_in_bytes: int
    properties: Mapping[str, str] = field(default_factory=dict)
    key_id: str | None = None

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Extract:
        o = _obj(obj, where)
        size = _int(_get(o, "tracking-file-size-in-bytes", where), f"{where}.tracking-file-size-in-bytes")
        if size < 0:
            raise InvalidInputError(f"{where}.tracking-file-size-in-bytes: must not be negative, got {size}")
        key_id = _get(o, "key-id", where, required=False)
        return cls(
            extract_id=_int(_get(o, "extract-id", where), f"{where}.extract-id"),
            source_table_snapshot_id=_int(
                _get(o, "source-table-snapshot-id", where), f"{where}.source-table-snapshot-id"
            ),
            extract_schema_id=_int(_get(o, "extract-schema-id", where), f"{where}.extract-schema-id"),
            timestamp_ms=_int(_get(o, "timestamp-ms", where), f"{where}.timestamp-ms"),
            tracking_file=_str(_get(o, "tracking-file", where), f"{where}.tracking-file"),
            tracking_file_size_in_bytes=size,
            properties=_string_map(_get(o, "properties", where, required=False), f"{where}.properties"),
            key_id=None if key_id is None else _str(key_id, f"{where}.key-id"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "extract-id": self.extract_id,
            "source-table-snapshot-id": self.source_table_snapshot_id,
            "extract-schema-id": self.extract_schema_id,
            "timestamp-ms": self.timestamp_ms,
            "tracking-file": self.tracking_file,
            "tracking-file-size-in-bytes": self.tracking_file_size_in_bytes,
        }
        if self.properties:
            out["properties"] = dict(self.properties)
        if self.key_id is not None:
            out["key-id"] = self.key_id
        return out


@dataclass(frozen=True)
class MetadataLogEntry:
    metadata_file: str
    timestamp_ms: int

    @classmethod
    def from_json(cls, obj: Any, where: str) -> MetadataLogEntry:
        o = _obj(obj, where)
        return cls(
            _str(_get(o, "metadata-file", where), f"{where}.metadata-file"),
            _int(_get(o, "timestamp-ms", where), f"{where}.timestamp-ms"),
        )

    def to_json(self) -> dict[str, Any]:
        return {"metadata-file": self.metadata_file, "timestamp-ms": self.timestamp_ms}


@dataclass(frozen=True)
class EncryptionKey:
    """The table spec's encryption-key structure."""

    key_id: str
    encrypted_key_metadata: str
    encrypted_by_id: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> EncryptionKey:
        o = _obj(obj, where)
        by = _get(o, "encrypted-by-id", where, required=False)
        return cls(
            _str(_get(o, "key-id", where), f"{where}.key-id"),
            _str(_get(o, "encrypted-key-metadata", where), f"{where}.encrypted-key-metadata"),
            None if by is None else _str(by, f"{where}.encrypted-by-id"),
            _string_map(_get(o, "properties", where, required=False), f"{where}.properties"),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key-id": self.key_id, "encrypted-key-metadata": self.encrypted_key_metadata}
        if self.encrypted_by_id is not None:
            out["encrypted-by-id"] = self.encrypted_by_id
        if self.properties:
            out["properties"] = dict(self.properties)
        return out


@dataclass(frozen=True)
class OrderingField:
    """One component of the ordering key, as builders and readers need it.

    ``expression`` reads the extract schema (field IDs of identity columns); ``stats_only`` tells
    whether the value is stored in region files (an identity column) or only in tracking stats.
    """

    field_id: int
    data_type: PrimitiveType
    expression: IndexExpression
    stats_only: bool


@dataclass(frozen=True)
class IndexMetadata:
    """One index metadata file. Immutable: updates return a new instance (``dataclasses.replace``)."""

    index_uuid: str
    table_uuid: str
    location: str
    last_updated_ms: int
    identity_fields: tuple[IdentityField, ...]
    schemas: tuple[Schema, ...]
    ordering_key: tuple[int, ...]
    stats_fields: tuple[StatsField, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    extracts: tuple[Extract, ...] = ()
    metadata_log: tuple[MetadataLogEntry, ...] = ()
    encryption_keys: tuple[EncryptionKey, ...] = ()
    index_type: str = INDEX_TYPE_SCALAR
    format_version: int = FORMAT_VERSION

    # JSON

    @classmethod
    def from_json(cls, obj: Any) -> IndexMetadata:
        """Read a parsed index metadata JSON object and check every structural rule."""
        o = _obj(obj, "index metadata")
        unknown = sorted(set(o) - _TOP_LEVEL_KEYS)
        if unknown:
            # Fields of other drafts (e.g. materialized-fields) change the meaning: refuse, don't drop.
            raise InvalidInputError(f"index metadata: unknown field(s) {', '.join(map(repr, unknown))}")
        version = _int(_get(o, "format-version", "index metadata"), "format-version")
        if version != FORMAT_VERSION:
            raise InvalidInputError(f"format-version: must be {FORMAT_VERSION}, got {version}")
        index_type = _str(_get(o, "index-type", "index metadata"), "index-type").lower()
        metadata = cls(
            format_version=version,
            index_uuid=_uuid(_get(o, "index-uuid", "index metadata"), "index-uuid"),
            table_uuid=_uuid(_get(o, "table-uuid", "index metadata"), "table-uuid"),
            location=_str(_get(o, "location", "index metadata"), "location"),
            last_updated_ms=_int(_get(o, "last-updated-ms", "index metadata"), "last-updated-ms"),
            index_type=index_type,
            identity_fields=tuple(
                IdentityField.from_json(v, f"identity-fields[{i}]")
                for i, v in enumerate(_list(_get(o, "identity-fields", "index metadata"), "identity-fields"))
            ),
            schemas=tuple(
                _schema_from_json(v, f"schemas[{i}]")
                for i, v in enumerate(_list(_get(o, "schemas", "index metadata"), "schemas"))
            ),
            stats_fields=tuple(
                StatsField.from_json(v, f"stats-fields[{i}]")
                for i, v in enumerate(_list(o.get("stats-fields"), "stats-fields"))
            ),
            ordering_key=tuple(
                _int(v, f"ordering-key[{i}]")
                for i, v in enumerate(_list(_get(o, "ordering-key", "index metadata"), "ordering-key"))
            ),
            properties=_string_map(o.get("properties"), "properties"),
            extracts=tuple(
                Extract.from_json(v, f"extracts[{i}]") for i, v in enumerate(_list(o.get("extracts"), "extracts"))
            ),
            metadata_log=tuple(
                MetadataLogEntry.from_json(v, f"metadata-log[{i}]")
                for i, v in enumerate(_list(o.get("metadata-log"), "metadata-log"))
            ),
            encryption_keys=tuple(
                EncryptionKey.from_json(v, f"encryption-keys[{i}]")
                for i, v in enumerate(_list(o.get("encryption-keys"), "encryption-keys"))
            ),
        )
        check_metadata(metadata)
        return metadata

    def to_json(self) -> dict[str, Any]:
        """The JSON object; optional lists and maps are written only when non-empty."""
        out: dict[str, Any] = {
            "format-version": self.format_version,
            "index-uuid": self.index_uuid,
            "table-uuid": self.table_uuid,
            "location": self.location,
            "last-updated-ms": self.last_updated_ms,
            "index-type": self.index_type.lower(),
            "identity-fields": [f.to_json() for f in self.identity_fields],
            "schemas": [_schema_to_json(s) for s in self.schemas],
        }
        if self.stats_fields:
            out["stats-fields"] = [f.to_json() for f in self.stats_fields]
        out["ordering-key"] = list(self.ordering_key)
        optional: list[tuple[str, Any]] = [
            ("properties", dict(self.properties)),
            ("extracts", [e.to_json() for e in self.extracts]),
            ("metadata-log", [e.to_json() for e in self.metadata_log]),
            ("encryption-keys", [k.to_json() for k in self.encryption_keys]),
        ]
        out.update((key, value) for key, value in optional if value)
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
        updated = replace(self, extracts=(*self.extracts, extract))
        check_metadata(updated)
        return updated

    def without_extracts(self, extract_ids: Iterable[int]) -> IndexMetadata:
        drop = set(extract_ids)
        return replace(self, extracts=tuple(e for e in self.extracts if e.extract_id not in drop))

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
