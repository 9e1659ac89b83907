"""The index metadata file of the Iceberg index spec (Part 1, format-version 1): model, JSON, rules.

``IndexMetadata.from_json`` reads the JSON exactly and checks every structural rule of the
spec; ``validate(table_metadata)`` adds the rules that need the table (its UUID, and the
identity column types of each extract's source snapshot). Every error names the field (S7).

Helpers used by the build, lookup and expiry code live here too: the extract schema for a
snapshot, the ordering-key fields and their expressions, content-stats IDs, and the index
properties with their documented defaults (``docs/index-format.md``).
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
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    TimestampNanoType,
    TimestampType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.expressions import (
    FILE_COLUMN_ID,
    FORBIDDEN_COLUMNS,
    METADATA_COLUMNS,
    POS_COLUMN_ID,
    Apply,
    IndexExpression,
    Reference,
    is_orderable,
    parse_expression_text,
)
from airflow_iceberg_maint.locations import Uri

FORMAT_VERSION = 1
INDEX_TYPE_SCALAR = "scalar"
MAX_FIELD_ID = 2147483447  # IDs above are reserved for metadata columns (table spec)

# Content stats (table spec "Field Statistics" plus the index spec's group_max_value).
STATS_ID_START = 10_000
STATS_ID_END = 200_000_000  # exclusive
STATS_IDS_PER_FIELD = 200
LOWER_BOUND = 1
UPPER_BOUND = 2
TIGHT_BOUNDS = 3
VALUE_COUNT = 4
NULL_VALUE_COUNT = 5
NAN_VALUE_COUNT = 6
AVG_VALUE_SIZE_IN_BYTES = 7
GROUP_MAX_VALUE = 8
MAX_STATS_FIELD_ID = (STATS_ID_END - 1 - STATS_ID_START) // STATS_IDS_PER_FIELD  # 999_949

# Index properties (names and defaults decided in docs/index-format.md).
REGION_TARGET_SIZE = "write.region.target-file-size-bytes"
REGION_TARGET_SIZE_DEFAULT = 64 * 1024 * 1024
ALLOW_KEY_SPANNING = "write.region.allow-key-spanning"
ALLOW_KEY_SPANNING_DEFAULT = False
PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
PREVIOUS_VERSIONS_MAX_DEFAULT = 100
DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
DELETE_AFTER_COMMIT_DEFAULT = False
COMMIT_NUM_RETRIES = "commit.retry.num-retries"
COMMIT_NUM_RETRIES_DEFAULT = 10

_TOP_LEVEL_KEYS = frozenset(
    {
        "format-version", "index-uuid", "table-uuid", "location", "last-updated-ms", "index-type",
        "identity-fields", "schemas", "stats-fields", "ordering-key", "properties", "extracts",
        "metadata-log", "encryption-keys",
    }
)


def stats_base_id(field_id: int) -> int:
    """ID of the stats struct of an index field inside ``content_stats``: ``10_000 + 200 * field-id``."""
    return STATS_ID_START + STATS_IDS_PER_FIELD * field_id


def stats_metric_id(field_id: int, offset: int) -> int:
    """ID of one metric (``LOWER_BOUND``, ..., ``GROUP_MAX_VALUE``) of an index field's stats struct."""
    return stats_base_id(field_id) + offset


def now_ms() -> int:
    return int(time.time() * 1000)


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
        metadata.check()
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

    # Rules

    def check(self) -> None:
        """Every rule of the spec that needs only this file. Raises ``InvalidInputError`` naming the field."""
        if self.index_type.lower() != INDEX_TYPE_SCALAR:
            raise InvalidInputError(f"index-type: {self.index_type!r} is not supported (expected 'scalar')")
        if not is_absolute_location(self.location):
            raise InvalidInputError(f"location: {self.location!r} must be an absolute location")
        self._check_identity_fields()
        self._check_schemas()
        self._check_stats_fields()
        self._check_ordering_key()
        self._check_extracts()
        key_ids = [k.key_id for k in self.encryption_keys]
        if len(set(key_ids)) != len(key_ids):
            raise InvalidInputError(f"encryption-keys: key-id values must be unique, got {key_ids}")

    def _check_identity_fields(self) -> None:
        if not self.identity_fields:
            raise InvalidInputError("identity-fields: must not be empty")
        sources, ids = set(), set()
        for i, f in enumerate(self.identity_fields):
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

    def _check_schemas(self) -> None:
        if not self.schemas:
            raise InvalidInputError("schemas: must not be empty")
        wanted = [f.field_id for f in self.identity_fields]
        seen: set[int] = set()
        for i, schema in enumerate(self.schemas):
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
                source = self.source_id_of(f.field_id)
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
                self._check_schema_evolution(self.schemas[i - 1], schema, where)

    @staticmethod
    def _check_schema_evolution(previous: Schema, schema: Schema, where: str) -> None:
        for old, new in zip(previous.fields, schema.fields, strict=True):
            if old.name != new.name:
                raise InvalidInputError(f"{where}: field {new.field_id} renamed from {old.name!r} to {new.name!r}")
            if not is_valid_promotion(old.field_type, new.field_type):
                raise InvalidInputError(
                    f"{where}: field {new.field_id} type {old.field_type} -> {new.field_type} is not a valid promotion"
                )
            if new.required and not old.required:
                raise InvalidInputError(f"{where}: field {new.field_id} changed from optional to required")

    def _check_stats_fields(self) -> None:
        schema = self.current_schema()
        identity_ids = {f.field_id for f in self.identity_fields}
        seen: set[int] = set()
        for i, f in enumerate(self.stats_fields):
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

    def _check_ordering_key(self) -> None:
        if not self.ordering_key:
            raise InvalidInputError("ordering-key: must not be empty")
        if len(set(self.ordering_key)) != len(self.ordering_key):
            raise InvalidInputError(f"ordering-key: {list(self.ordering_key)} repeats a field")
        types = self._index_field_types()
        for i, field_id in enumerate(self.ordering_key):
            where = f"ordering-key[{i}]"
            if field_id not in types:
                raise InvalidInputError(f"{where}: {field_id} is not an extract schema field nor a stats-only field")
            if not is_orderable(types[field_id]):
                raise InvalidInputError(f"{where}: field {field_id} has type {types[field_id]}, which has no order")
            if not 0 <= field_id <= MAX_STATS_FIELD_ID:
                raise InvalidInputError(f"{where}: field {field_id} is too large to carry content stats")

    def _check_extracts(self) -> None:
        schema_ids = {s.schema_id for s in self.schemas}
        key_ids = {k.key_id for k in self.encryption_keys}
        seen: set[int] = set()
        for i, e in enumerate(self.extracts):
            where = f"extracts[{i}]"
            if e.extract_id in seen:
                raise InvalidInputError(f"{where}.extract-id: {e.extract_id} appears more than once")
            seen.add(e.extract_id)
            if e.extract_schema_id not in schema_ids:
                raise InvalidInputError(f"{where}.extract-schema-id: no schema with ID {e.extract_schema_id}")
            if e.key_id is not None and e.key_id not in key_ids:
                raise InvalidInputError(f"{where}.key-id: {e.key_id!r} is not in encryption-keys")

    def validate(self, table_metadata: TableMetadata) -> None:
        """Check the rules that need the table: its UUID, and each extract's identity column types.

        Extracts whose source snapshot the table no longer has cannot be checked (nor used).
        """
        self.check()
        if uuid.UUID(self.table_uuid) != uuid.UUID(str(table_metadata.table_uuid)):
            raise InvalidInputError(
                f"table-uuid: {self.table_uuid} is not the table's UUID {table_metadata.table_uuid}"
            )
        for i, extract in enumerate(self.extracts):
            if table_metadata.snapshot_by_id(extract.source_table_snapshot_id) is None:
                continue
            expected = self._schema_fields_for_snapshot(table_metadata, extract.source_table_snapshot_id)
            actual = self.schema_by_id(extract.extract_schema_id)
            for want, got in zip(expected, actual.fields, strict=True):
                if got.field_type != want.field_type or (got.required and not want.required):
                    raise InvalidInputError(
                        f"extracts[{i}].extract-schema-id: identity column {got.field_id} is "
                        f"{'required' if got.required else 'optional'} {got.field_type}, but its source in snapshot "
                        f"{extract.source_table_snapshot_id} is {'required' if want.required else 'optional'} "
                        f"{want.field_type}"
                    )

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

    def _index_field_types(self, schema: Schema | None = None) -> dict[int, IcebergType]:
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

    def to_source_expression(self, expression: IndexExpression) -> IndexExpression:
        """An expression over extract field IDs rewritten over source IDs, to evaluate on table rows."""
        return expression.remap({f.field_id: f.source_id for f in self.identity_fields})

    def required_stats(self) -> dict[int, tuple[int, ...]]:
        """Index field ID -> the metric offsets each tracking entry must carry for it."""
        required: dict[int, tuple[int, ...]] = {f.field_id: (LOWER_BOUND, UPPER_BOUND) for f in self.stats_fields}
        required.update((fid, (LOWER_BOUND, UPPER_BOUND, GROUP_MAX_VALUE)) for fid in self.ordering_key)
        return required

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

    def previous_versions_max(self) -> int:
        return self._int_property(PREVIOUS_VERSIONS_MAX, PREVIOUS_VERSIONS_MAX_DEFAULT, 0)

    def delete_after_commit(self) -> bool:
        return self._bool_property(DELETE_AFTER_COMMIT, DELETE_AFTER_COMMIT_DEFAULT)

    def commit_num_retries(self) -> int:
        return self._int_property(COMMIT_NUM_RETRIES, COMMIT_NUM_RETRIES_DEFAULT, 0)

    def check_properties(self) -> None:
        """Parse every known property, so a bad value is refused when it is set (S7)."""
        self.region_target_size_bytes()
        self.allow_key_spanning()
        self.previous_versions_max()
        self.delete_after_commit()
        self.commit_num_retries()

    # Updates (each returns a new, checked instance)

    def with_extract(self, extract: Extract) -> IndexMetadata:
        updated = replace(self, extracts=(*self.extracts, extract))
        updated.check()
        return updated

    def without_extracts(self, extract_ids: Iterable[int]) -> IndexMetadata:
        drop = set(extract_ids)
        return replace(self, extracts=tuple(e for e in self.extracts if e.extract_id not in drop))

    def with_properties(self, updates: Mapping[str, str], removals: Iterable[str] = ()) -> IndexMetadata:
        properties = {k: v for k, v in self.properties.items() if k not in set(removals)}
        properties.update(updates)
        updated = replace(self, properties=properties)
        updated.check_properties()
        return updated

    def new_extract_id(self) -> int:
        """A random positive 63-bit ID not used by any current extract."""
        used = {e.extract_id for e in self.extracts}
        while True:
            candidate = random.SystemRandom().randrange(1, 2**63)
            if candidate not in used:
                return candidate

    def _schema_fields_for_snapshot(self, table_metadata: TableMetadata, snapshot_id: int) -> list[NestedField]:
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

    def with_extract_schema_for(self, table_metadata: TableMetadata, snapshot_id: int) -> tuple[IndexMetadata, int]:
        """The extract schema ID to use for an extract of this snapshot, adding a schema if none matches.

        Call it inside the commit update (``IndexStore.commit``), so a retry re-derives it on the
        latest metadata. Stats-only ``data-type`` values follow promotions of their inputs.
        """
        fields = self._schema_fields_for_snapshot(table_metadata, snapshot_id)
        for schema in self.schemas:
            if list(schema.fields) == fields:
                return self, schema.schema_id
        new_schema = Schema(*fields, schema_id=max(s.schema_id for s in self.schemas) + 1)
        self._check_schema_evolution(self.current_schema(), new_schema, f"snapshot {snapshot_id}")
        stats = []
        for f in self.stats_fields:
            promoted = f.expr.result_type(new_schema)
            if not is_valid_promotion(f.data_type, promoted):
                raise InvalidInputError(
                    f"stats-fields: field {f.field_id} type {f.data_type} -> {promoted} is not a valid promotion"
                )
            stats.append(replace(f, data_type=promoted))
        updated = replace(self, schemas=(*self.schemas, new_schema), stats_fields=tuple(stats))
        updated.check()
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


def index_location(table_location: str, name: str) -> str:
    """``<table-location>/index/<name>``: where the index's metadata and data files live."""
    return f"{table_location.rstrip('/')}/index/{name}"


def check_index_name(name: str) -> str:
    """An index name is one safe path component: letters, digits, ``_``, ``-`` and ``.`` (not leading)."""
    if not name or name.startswith(".") or not all(ch.isascii() and (ch.isalnum() or ch in "_-.") for ch in name):
        raise InvalidInputError(f"index name {name!r}: use letters, digits, '_', '-' and '.', not starting with '.'")
    return name


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
        column = next(f for f in schema.fields if f.field_id == source_id)
        identity.append(IdentityField(source_id, source_id))
        columns.append(NestedField(source_id, column.name, column.field_type, required=column.required))
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
        location=index_location(table.metadata.location, name),
        last_updated_ms=now_ms(),
        identity_fields=tuple(identity),
        schemas=(extract_schema,),
        ordering_key=tuple(ordering_key),
        stats_fields=tuple(stats),
        properties=dict(properties),
    )
    metadata.check()
    metadata.check_properties()
    return metadata
