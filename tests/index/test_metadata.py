"""The index metadata file: exact JSON round trip, one failing case per spec rule, creation, evolution."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestampType

from airflow_iceberg_maint.cli.index import ordering_texts
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.builders import new_extract, new_index_metadata, with_extract_schema_for
from airflow_iceberg_maint.index.metadata.expressions import Apply, Reference
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.rules import validate_against_table
from airflow_iceberg_maint.index.metadata.spec import (
    GROUP_MAX_VALUE,
    LOWER_BOUND,
    UPPER_BOUND,
    stats_base_id,
    stats_metric_id,
)

LOCATION = "s3://bucket/warehouse/default.db/events/index/bucket_index"
BUCKET_EXPR = {
    "type": "apply",
    "function": {"catalog": "iceberg_functions", "identifier": ["bucket"]},
    "arguments": [256, {"type": "reference", "id": 1}],
}
# The draft's worked example, in the field names of the version read here (identity-fields as objects, the
# row location as identity columns of _file/_pos, the bucket as a stats-only field).
APPENDIX_C: dict[str, Any] = {
    "format-version": 1,
    "index-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
    "table-uuid": "fb072c92-a02b-11e9-ae9c-1bb7bc9eca94",
    "location": LOCATION,
    "last-updated-ms": 1573518981593,
    "index-type": "scalar",
    "identity-fields": [
        {"source-id": 1, "field-id": 1},
        {"source-id": 2147483646, "field-id": 105},
        {"source-id": 2147483645, "field-id": 106},
    ],
    "schemas": [
        {
            "type": "struct",
            "schema-id": 0,
            "fields": [
                {"id": 1, "name": "user_id", "type": "long", "required": False},
                {"id": 105, "name": "file", "type": "string", "required": True},
                {"id": 106, "name": "pos", "type": "long", "required": True},
            ],
        }
    ],
    "stats-fields": [{"field-id": 104, "type": "expr-value", "data-type": "int", "expr": BUCKET_EXPR}],
    "ordering-key": [104, 1],
    "extracts": [
        {
            "extract-id": 8744736658442914487,
            "source-table-snapshot-id": 3055729675574597004,
            "extract-schema-id": 0,
            "timestamp-ms": 1573518431292,
            "tracking-file": f"{LOCATION}/metadata/tracking-00001-(uuid).parquet",
            "tracking-file-size-in-bytes": 2048,
        },
        {
            "extract-id": 6574117201097113750,
            "source-table-snapshot-id": 5459876531255530170,
            "extract-schema-id": 0,
            "timestamp-ms": 1573518981593,
            "tracking-file": f"{LOCATION}/metadata/tracking-00002-(uuid).parquet",
            "tracking-file-size-in-bytes": 2110,
        },
    ],
    "metadata-log": [
        {"metadata-file": f"{LOCATION}/metadata/00001-(uuid).metadata.json", "timestamp-ms": 1573518431292}
    ],
}


def appendix_c() -> dict[str, Any]:
    return copy.deepcopy(APPENDIX_C)


def test_appendix_c_round_trips_exactly() -> None:
    metadata = IndexMetadata.from_json(appendix_c())
    assert metadata.to_json() == APPENDIX_C
    assert IndexMetadata.from_bytes(metadata.to_bytes(), "x") == metadata
    assert metadata.ordering_key == (104, 1)
    assert metadata.stats_fields[0].expr == Apply("bucket", Reference(1), 256)
    assert [(f.field_id, f.data_type, f.stats_only) for f in metadata.ordering_fields()] == [
        (104, IntegerType(), True),
        (1, LongType(), False),
    ]
    assert metadata.newest_extract().extract_id == 6574117201097113750


def test_optional_fields_read_as_empty_and_full_form_round_trips() -> None:
    obj = appendix_c()
    for key in ("stats-fields", "extracts", "metadata-log"):
        del obj[key]
    obj["ordering-key"] = [1]
    metadata = IndexMetadata.from_json(obj)
    assert (metadata.extracts, metadata.metadata_log, metadata.stats_fields, metadata.properties) == ((), (), (), {})
    assert metadata.encryption_keys == ()
    assert metadata.to_json() == obj

    full = appendix_c()
    full["properties"] = {"write.region.target-file-size-bytes": "1048576"}
    full["encryption-keys"] = [
        {"key-id": "k1", "encrypted-key-metadata": "AAEC", "encrypted-by-id": "kms", "properties": {"a": "b"}}
    ]
    full["extracts"][0]["key-id"] = "k1"
    full["extracts"][0]["properties"] = {"built-by": "test"}
    assert IndexMetadata.from_json(full).to_json() == full


def test_index_type_is_read_case_insensitively_and_written_lower_case() -> None:
    obj = appendix_c()
    obj["index-type"] = "SCALAR"
    assert IndexMetadata.from_json(obj).to_json()["index-type"] == "scalar"


def test_stats_ids() -> None:
    assert stats_base_id(1) == 10_200
    assert [stats_metric_id(104, o) for o in (LOWER_BOUND, UPPER_BOUND, GROUP_MAX_VALUE)] == [30_801, 30_802, 30_808]


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = obj
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(last)] = value
        elif value is _DELETE:
            del target[last]
        else:
            target[last] = value

    return mutate


_DELETE = object()
_GEO_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "user_id", "type": "geometry", "required": False},
        {"id": 105, "name": "file", "type": "string", "required": True},
        {"id": 106, "name": "pos", "type": "long", "required": True},
    ],
}

RULES: list[tuple[str, Mutation, str]] = [
    ("format-version", _set("format-version", 2), "format-version: must be 1, got 2"),
    ("required field", _set("index-uuid", _DELETE), "index metadata: required field 'index-uuid' is missing"),
    ("uuid", _set("table-uuid", "nope"), "table-uuid: 'nope' is not a UUID"),
    ("location", _set("location", "warehouse/idx"), "location: 'warehouse/idx' must be an absolute location"),
    ("index-type", _set("index-type", "bloom"), "index-type: 'bloom' is not supported (expected 'scalar')"),
    ("unknown field", _set("materialized-fields", []), "index metadata: unknown field(s) 'materialized-fields'"),
    ("identity empty", _set("identity-fields", []), "identity-fields: must not be empty"),
    (
        "identity unique source",
        _set("identity-fields.1.source-id", 1),
        "identity-fields[1].source-id: 1 appears more than once",
    ),
    (
        "identity unique field",
        _set("identity-fields.2.field-id", 105),
        "identity-fields[2].field-id: 105 appears more than once",
    ),
    (
        "forbidden metadata column",
        _set("identity-fields.1.source-id", 2147483644),
        "identity-fields[1].source-id: metadata column '_deleted' (2147483644) cannot be indexed",
    ),
    (
        "forbidden _partition",
        _set("identity-fields.1.source-id", 2147483642),
        "identity-fields[1].source-id: metadata column '_partition' (2147483642) cannot be indexed",
    ),
    ("forbidden changelog", _set("identity-fields.1.source-id", 2147483543), "metadata column '_change_type'"),
    ("forbidden delete column", _set("identity-fields.1.source-id", 2147483546), "metadata column 'file_path'"),
    ("reserved field id", _set("identity-fields.1.field-id", 2147483500), "identity-fields[1].field-id: 2147483500"),
    ("schemas empty", _set("schemas", []), "schemas: must not be empty"),
    (
        "schema fields",
        _set("schemas.0.fields", [{"id": 1, "name": "user_id", "type": "long", "required": False}]),
        "schemas[0]: fields must be the identity columns [1, 105, 106] in identity-fields order, got [1]",
    ),
    (
        "metadata column type",
        _set("schemas.0.fields.2", {"id": 106, "name": "pos", "type": "int", "required": True}),
        "schemas[0]: identity column 106 of _pos must be required long",
    ),
    (
        "stats unique id",
        _set("stats-fields.0.field-id", 105),
        "stats-fields[0].field-id: 105 is not unique among index field IDs",
    ),
    ("stats type", _set("stats-fields.0.type", "identity"), "stats-fields[0].type: must be 'expr-value'"),
    (
        "stats references identity only",
        _set("stats-fields.0.expr.arguments.1.id", 2),
        "stats-fields[0].expr: references [2], which are not identity columns",
    ),
    (
        "stats data-type",
        _set("stats-fields.0.data-type", "long"),
        "stats-fields[0].data-type: long is not the expression's type int",
    ),
    (
        "stats expr",
        _set("stats-fields.0.expr", {"type": "apply", "function": "random", "arguments": []}),
        "stats-fields[0].expr: expression",
    ),
    ("stats id range", _set("stats-fields.0.field-id", 1_000_000), "stats-fields[0].field-id: 1000000 is outside"),
    ("ordering empty", _set("ordering-key", []), "ordering-key: must not be empty"),
    (
        "ordering unknown",
        _set("ordering-key", [104, 7]),
        "ordering-key[1]: 7 is not an extract schema field nor a stats-only field",
    ),
    ("ordering repeats", _set("ordering-key", [104, 104]), "ordering-key: [104, 104] repeats a field"),
    (
        "ordering orderable",
        lambda o: o.update({"schemas": [copy.deepcopy(_GEO_SCHEMA)], "stats-fields": [], "ordering-key": [1]}),
        "ordering-key[0]: field 1 has type geometry, which has no order",
    ),
    (
        "extract unique id",
        _set("extracts.1.extract-id", 8744736658442914487),
        "extracts[1].extract-id: 8744736658442914487 appears more than once",
    ),
    (
        "extract schema id",
        _set("extracts.0.extract-schema-id", 3),
        "extracts[0].extract-schema-id: no schema with ID 3",
    ),
    (
        "extract size",
        _set("extracts.0.tracking-file-size-in-bytes", -1),
        "extracts[0].tracking-file-size-in-bytes: must not be negative, got -1",
    ),
    (
        "extract size required",
        _set("extracts.0.tracking-file-size-in-bytes", _DELETE),
        "extracts[0]: required field 'tracking-file-size-in-bytes' is missing",
    ),
    ("extract key-id", _set("extracts.0.key-id", "k9"), "extracts[0].key-id: 'k9' is not in encryption-keys"),
    ("extract id type", _set("extracts.0.extract-id", "1"), "extracts[0].extract-id: expected an integer, got '1'"),
    (
        "metadata-log entry",
        _set("metadata-log.0.timestamp-ms", _DELETE),
        "metadata-log[0]: required field 'timestamp-ms' is missing",
    ),
    ("properties", _set("properties", {"a": 1}), "properties: expected a map of strings to strings"),
    (
        "encryption keys unique",
        _set("encryption-keys", [{"key-id": "k", "encrypted-key-metadata": "A"}] * 2),
        "encryption-keys: key-id values must be unique",
    ),
    ("data type", _set("stats-fields.0.data-type", "struct"), "stats-fields[0].data-type: 'struct' is not an Iceberg"),
]


@pytest.mark.parametrize(("mutate", "message"), [(m, msg) for _, m, msg in RULES], ids=[r[0] for r in RULES])
def test_each_rule_is_enforced_with_the_field_named(mutate: Mutation, message: str) -> None:
    obj = appendix_c()
    mutate(obj)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        IndexMetadata.from_json(obj)


EVOLUTION: list[tuple[str, dict[str, Any], str]] = [
    (
        "optional to required",
        {"id": 1, "name": "user_id", "type": "long", "required": True},
        "schemas[1]: field 1 changed from optional to required",
    ),
    (
        "narrowing",
        {"id": 1, "name": "user_id", "type": "int", "required": False},
        "schemas[1]: field 1 type long -> int is not a valid promotion",
    ),
    (
        "rename",
        {"id": 1, "name": "uid", "type": "long", "required": False},
        "schemas[1]: field 1 renamed from 'user_id' to 'uid'",
    ),
]


@pytest.mark.parametrize(("field", "message"), [(f, m) for _, f, m in EVOLUTION], ids=[e[0] for e in EVOLUTION])
def test_extract_schema_evolution_rules(field: dict[str, Any], message: str) -> None:
    obj = appendix_c()
    evolved = copy.deepcopy(obj["schemas"][0])
    evolved["schema-id"] = 1
    evolved["fields"][0] = field
    obj["schemas"].append(evolved)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        IndexMetadata.from_json(obj)


def test_duplicate_schema_ids_are_refused() -> None:
    obj = appendix_c()
    obj["schemas"].append(copy.deepcopy(obj["schemas"][0]))
    with pytest.raises(InvalidInputError, match=re.escape("schemas[1].schema-id: 0 appears more than once")):
        IndexMetadata.from_json(obj)


# Rules that need the table, and creation from a real table

TABLE_SCHEMA = Schema(
    NestedField(1, "id", IntegerType(), required=False),
    NestedField(2, "name", StringType(), required=True),
    NestedField(3, "ts", TimestampType(), required=False),
)


def make_table(catalog: SqlCatalog) -> Table:
    table = catalog.create_table("db.events", TABLE_SCHEMA)
    table.append(
        pa.Table.from_pylist(
            [{"id": 1, "name": "a", "ts": None}],
            schema=pa.schema(
                [
                    pa.field("id", pa.int32()),
                    pa.field("name", pa.string(), nullable=False),
                    pa.field("ts", pa.timestamp("us")),
                ]
            ),
        )
    )
    return table


def test_new_index_metadata_from_cli_arguments(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    metadata = new_index_metadata(
        table,
        "by_id",
        ["bucket(16, id)", "id", "day(ts)"],
        ["name"],
        True,
        {"write.region.target-file-size-bytes": "1000"},
    )
    out = metadata.to_json()
    assert out["location"] == f"{table.location()}/index/by_id"
    assert out["table-uuid"] == str(table.metadata.table_uuid)
    assert out["identity-fields"] == [
        {"source-id": 1, "field-id": 1},
        {"source-id": 3, "field-id": 3},
        {"source-id": 2, "field-id": 2},
        {"source-id": 2147483646, "field-id": 4},
        {"source-id": 2147483645, "field-id": 5},
    ]
    assert out["schemas"] == [
        {
            "type": "struct",
            "schema-id": 0,
            "fields": [
                {"id": 1, "name": "id", "type": "int", "required": False},
                {"id": 3, "name": "ts", "type": "timestamp", "required": False},
                {"id": 2, "name": "name", "type": "string", "required": True},
                {"id": 4, "name": "_file", "type": "string", "required": True},
                {"id": 5, "name": "_pos", "type": "long", "required": True},
            ],
        }
    ]
    assert out["stats-fields"] == [
        {"field-id": 6, "type": "expr-value", "data-type": "int", "expr": Apply("bucket", Reference(1), 16).to_json()},
        {"field-id": 7, "type": "expr-value", "data-type": "date", "expr": Apply("day", Reference(3)).to_json()},
    ]
    assert out["ordering-key"] == [6, 1, 7]
    assert out["properties"] == {"write.region.target-file-size-bytes": "1000"}
    assert "extracts" not in out
    assert metadata.region_target_size_bytes() == 1000
    assert ordering_texts(metadata) == ["bucket(16, id)", "id", "day(ts)"]
    validate_against_table(metadata, table.metadata)


@pytest.mark.parametrize(
    ("ordering", "identity", "properties", "message"),
    [
        (["nope"], [], {}, "expression 'nope': the table has no top-level column 'nope'"),
        ([], [], {}, "ordering: at least one expression is required"),
        (["id"], ["missing"], {}, "identity column 'missing': the table has no top-level column of that name"),
        (["id", "id"], [], {}, "ordering-key: [1, 1] repeats a field"),
        (
            ["id"],
            [],
            {"write.region.target-file-size-bytes": "big"},
            "properties.write.region.target-file-size-bytes: expected an integer >= 1, got 'big'",
        ),
        (
            ["id"],
            [],
            {"write.region.allow-key-spanning": "yes"},
            "properties.write.region.allow-key-spanning: expected 'true' or 'false', got 'yes'",
        ),
        (
            ["id"],
            [],
            {"write.build.memory-budget-bytes": "0"},
            "properties.write.build.memory-budget-bytes: expected an integer >= 1, got '0'",
        ),
    ],
)
def test_new_index_metadata_errors(
    sqlite_catalog: SqlCatalog, ordering: list[str], identity: list[str], properties: dict[str, str], message: str
) -> None:
    table = make_table(sqlite_catalog)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        new_index_metadata(table, "by_id", ordering, identity, False, properties)


def test_property_defaults(sqlite_catalog: SqlCatalog) -> None:
    metadata = new_index_metadata(make_table(sqlite_catalog), "by_id", ["id"], [], False, {})
    assert (
        metadata.region_target_size_bytes(),
        metadata.allow_key_spanning(),
        metadata.previous_versions_max(),
        metadata.delete_after_commit(),
        metadata.commit_num_retries(),
        metadata.build_memory_budget_bytes(),
    ) == (64 * 1024 * 1024, False, 100, False, 10, 1024 * 1024 * 1024)


def test_validate_against_the_table(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    snapshot_id = table.current_snapshot().snapshot_id
    metadata = new_index_metadata(table, "by_id", ["id"], ["name"], False, {})
    metadata = metadata.with_extract(new_extract(metadata, snapshot_id, 0, "file:///t.parquet", 1))
    validate_against_table(metadata, table.metadata)

    wrong_uuid = IndexMetadata.from_json({**metadata.to_json(), "table-uuid": "00000000-0000-4000-8000-000000000000"})
    with pytest.raises(InvalidInputError, match=r"^table-uuid: 00000000-0000-4000-8000-000000000000 is not the table"):
        validate_against_table(wrong_uuid, table.metadata)

    obj = metadata.to_json()
    obj["schemas"][0]["fields"][0]["type"] = "long"  # the snapshot's schema says int
    with pytest.raises(
        InvalidInputError,
        match=re.escape(
            "extracts[0].extract-schema-id: identity column 1 is optional long, "
            f"but its source in snapshot {snapshot_id} is optional int"
        ),
    ):
        validate_against_table(IndexMetadata.from_json(obj), table.metadata)

    obj = metadata.to_json()
    obj["schemas"][0]["fields"][0]["required"] = True  # the source is optional
    with pytest.raises(InvalidInputError, match=re.escape("identity column 1 is required int, but its source")):
        validate_against_table(IndexMetadata.from_json(obj), table.metadata)


def test_extract_schema_follows_source_promotion(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    metadata = new_index_metadata(table, "by_id", ["truncate(10, id)", "id"], [], False, {})
    first_snapshot = table.current_snapshot().snapshot_id
    same, schema_id = with_extract_schema_for(metadata, table.metadata, first_snapshot)
    assert (same, schema_id) == (metadata, 0)

    with table.update_schema() as update:
        update.update_column("id", LongType())
    table.append(
        pa.table(
            {"id": pa.array([2], pa.int64()), "name": pa.array(["b"]), "ts": pa.array([None], pa.timestamp("us"))}
        ).cast(table.schema().as_arrow())
    )
    evolved, schema_id = with_extract_schema_for(metadata, table.metadata, table.current_snapshot().snapshot_id)

    assert schema_id == 1
    assert [(f.field_id, f.field_type) for f in evolved.schema_by_id(1).fields] == [(1, LongType())]
    assert evolved.stats_fields[0].data_type == LongType()  # truncate's result type follows its input
    assert evolved.schema_by_id(0) == metadata.schema_by_id(0)


def test_dropped_source_field_blocks_new_extracts(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    metadata = new_index_metadata(table, "by_ts", ["ts"], [], False, {})
    with table.update_schema() as update:
        update.delete_column("ts")
    table.append(pa.table({"id": pa.array([2], pa.int32()), "name": pa.array(["b"])}).cast(table.schema().as_arrow()))
    snapshot_id = table.current_snapshot().snapshot_id
    with pytest.raises(
        InvalidInputError,
        match=re.escape(
            f"identity-fields: source field 3 is not in the schema of snapshot {snapshot_id} (dropped): "
            "no new extract can be created"
        ),
    ):
        with_extract_schema_for(metadata, table.metadata, snapshot_id)


def test_updates_check_their_result(sqlite_catalog: SqlCatalog) -> None:
    table = make_table(sqlite_catalog)
    snapshot_id = table.current_snapshot().snapshot_id
    metadata = new_index_metadata(table, "by_id", ["id"], [], False, {})
    extract = new_extract(metadata, snapshot_id, 0, "file:///t.parquet", 1)
    once = metadata.with_extract(extract)
    with pytest.raises(InvalidInputError, match=re.escape(f"extracts[1].extract-id: {extract.extract_id} appears")):
        once.with_extract(extract)
    assert once.without_extracts([extract.extract_id]).extracts == ()
