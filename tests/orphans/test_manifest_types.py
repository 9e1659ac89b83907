"""Orphan removal on tables partitioned by every Iceberg type, in every Avro encoding (issue 9, item 5).

The engine reads only the paths out of manifests and skips the rest; a skip that disagrees with
the Avro encoding in the file shifts every later field. pyiceberg writes every decimal as
``fixed`` (checked below from the manifest headers); plain Avro writers use ``bytes``, and a uuid
may be a ``string``: manifests rewritten in those forms are read too. pyiceberg 0.12 cannot write
format v3, so ``timestamp_ns`` and the v3 manifest fields are covered by rewritten manifests.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, date, datetime
from datetime import time as dtime
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.catalog import Catalog
from pyiceberg.io.pyarrow import PyArrowFileIO, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, IdentityTransform, Transform, TruncateTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.reachability.manifests import live_file_paths, manifest_paths
from tests.orphans.scenario import Files, snapshot_row_counts

D = Decimal

# name: (type, three distinct non-null values); each table also gets a null partition.
TYPES: dict[str, tuple[IcebergType, list[Any]]] = {
    "boolean": (BooleanType(), [True, False, True]),
    "int": (IntegerType(), [1, -7, 2**31 - 1]),
    "long": (LongType(), [1, 1 << 40, -(1 << 62)]),
    "float": (FloatType(), [1.5, -2.25, 0.0]),
    "double": (DoubleType(), [1.5, -2.25, 1e300]),
    "date": (DateType(), [date(2024, 1, 2), date(1969, 12, 31), date(9999, 12, 31)]),
    "time": (TimeType(), [dtime(1, 2, 3, 4), dtime(23, 59, 59, 999999), dtime(0)]),
    "timestamp": (TimestampType(), [datetime(2024, 1, 2, 3, 4, 5, 6), datetime(1960, 1, 1), datetime(2262, 1, 1)]),
    "timestamptz": (
        TimestamptzType(),
        [
            datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
            datetime(1960, 1, 1, tzinfo=UTC),
            datetime(2262, 1, 1, tzinfo=UTC),
        ],
    ),
    "string": (StringType(), ["a/b", "München", "x" * 200]),
    "uuid": (UUIDType(), [uuid.UUID(int=1), uuid.UUID(int=2**127), uuid.UUID(int=2**128 - 1)]),
    "fixed7": (FixedType(7), [b"1234567", b"\x00\xff\x00\xff\x00\xff\x00", b"\x80" * 7]),
    "binary": (BinaryType(), [b"\x00\x01", b"\x01" * 70, b""]),
    "decimal1": (DecimalType(1, 0), [D("1"), D("-9"), D("0")]),
    "decimal9": (DecimalType(9, 2), [D("1234567.89"), D("-0.01"), D("9999999.99")]),
    "decimal10": (DecimalType(10, 2), [D("12345678.90"), D("-0.01"), D("99999999.99")]),
    "decimal18": (DecimalType(18, 3), [D("123456789012345.678"), D("-1.000"), D("999999999999999.999")]),
    "decimal19": (DecimalType(19, 4), [D("123456789012345.6789"), D("-1.0000"), D("999999999999999.9999")]),
    "decimal38": (
        DecimalType(38, 10),
        [
            D("1234567890123456789012345678.0123456789"),
            D("-1.5000000000"),
            D("9999999999999999999999999999.9999999999"),
        ],
    ),
}
# The Avro encoding pyiceberg writes for a decimal partition value: fixed, of the smallest size.
DECIMAL_FIXED_SIZE = {"decimal1": 1, "decimal9": 4, "decimal10": 5, "decimal18": 8, "decimal19": 9, "decimal38": 16}

CASES: list[tuple[str, Transform[Any, Any]]] = [(name, IdentityTransform()) for name in TYPES]
CASES += [(name, BucketTransform(4)) for name in DECIMAL_FIXED_SIZE]
CASES += [(name, TruncateTransform(10)) for name in ("decimal9", "decimal10", "decimal18", "decimal19", "decimal38")]


def _old(path: str) -> None:
    os.utime(local_path(path), (time.time() - 86400, time.time() - 86400))


def _manifest_schema(table: Table, path: str) -> dict[str, Any]:
    reader = AvroFile(table.io.new_input(path))  # type: ignore[var-annotated]
    reader.__enter__()
    return json.loads(reader.header.meta["avro.schema"])


def _partition_avro_type(table: Table) -> Any:
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path
    data_file = next(f for f in _manifest_schema(table, manifest)["fields"] if f["field-id"] == 2)
    partition = next(f for f in data_file["type"]["fields"] if f["field-id"] == 102)
    return partition["type"]["fields"][0]["type"]


def _append_uuid_rows(table: Table, rows: list[dict[str, Any]]) -> None:
    """pyarrow cannot group by its uuid type, so pyiceberg cannot append to a uuid-partitioned table.

    One Parquet file per partition is written with pyarrow under the table's data folder and
    committed with the partition value, as another engine would.
    """
    arrow = schema_to_pyarrow(table.schema())
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for value in dict.fromkeys(r["v"] for r in rows):
            part = pa.Table.from_pylist([r for r in rows if r["v"] == value], schema=arrow)
            path = f"{table.location()}/data/v={value}/{uuid.uuid4()}.parquet"
            os.makedirs(os.path.dirname(local_path(path)), exist_ok=True)
            ids = [
                pa.field(n, t, metadata={b"PARQUET:field_id": str(i).encode()})
                for i, (n, t) in enumerate([("id", pa.int64()), ("v", pa.binary(16))], 1)
            ]
            pq.write_table(part.cast(pa.schema(ids)), local_path(path))
            append.append_data_file(
                DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=path,
                    file_format=FileFormat.PARQUET,
                    partition=Record(value),
                    record_count=len(part),
                    file_size_in_bytes=os.path.getsize(local_path(path)),
                )
            )


def _make_table(
    catalog: Catalog, name: str, typ: IcebergType, values: list[Any], transform: Transform[Any, Any], version: int = 2
) -> tuple[Table, int]:
    """Three commits (two appends, an overwrite) so manifests have ADDED, EXISTING and DELETED entries."""
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", typ, required=False))
    table = catalog.create_table(
        f"db.{name}",
        schema=schema,
        partition_spec=PartitionSpec(PartitionField(2, 1000, transform, "p")),
        properties={"format-version": str(version)},
    )
    arrow = schema_to_pyarrow(schema)
    batches = [[{"id": i, "v": values[i % 3]} for i in range(6)], [{"id": 6, "v": None}, {"id": 7, "v": values[0]}]]
    for batch in batches:
        if isinstance(typ, UUIDType):
            _append_uuid_rows(table, [r for r in batch if r["v"] is not None])
        else:
            table.append(pa.Table.from_pylist(batch, schema=arrow))
    if not isinstance(typ, UUIDType):
        table.overwrite(pa.Table.from_pylist([{"id": 100, "v": values[1]}], schema=arrow), overwrite_filter="id < 2")
    table = catalog.load_table(f"db.{name}")
    return table, len(table.scan().to_arrow())


def _oracle(table: Table) -> set[str]:
    """Every file the metadata references, read with pyiceberg's full manifest decoding.

    Not ``inspect.all_files()``: pyarrow cannot build its table for a uuid partition.
    """
    md = table.metadata
    refs = {table.metadata_location} | {e.metadata_file for e in md.metadata_log}
    for snapshot in md.snapshots:
        refs.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            refs.add(manifest.manifest_path)
            refs |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)}
    return refs


def _plant(table: Table) -> set[str]:
    """Old orphans in data/, in a partition folder, and in metadata/; every file made old."""
    loc = table.location().rstrip("/")
    files = Files(table)
    planted = {
        files.put(f"{loc}/data/orphan-1.parquet"),
        files.put(f"{loc}/data/p=x/orphan-2.parquet"),
        files.put(f"{loc}/metadata/orphan-3.avro"),
    }
    for path in files.all_files(loc):
        _old(path)
    return planted


def _check_run(table: Table, planted: set[str], processes: int | None = None) -> None:
    """A dry run, then a real run: exactly the planted files, and nothing else, go."""
    loc = table.location().rstrip("/")
    files = Files(table)
    before = files.all_files(loc)
    cutoff = datetime.now(UTC)
    dry = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, dry_run=True, reader_processes=processes), sources=[INDEX_FILES]
    )
    assert set(dry.orphan_files) == planted
    assert files.all_files(loc) == before
    real = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff, reader_processes=processes), sources=[INDEX_FILES]
    )
    assert set(real.orphan_files) == planted
    assert real.deleted_file_count == len(planted) and real.failed == []
    assert files.all_files(loc) == before - planted


@pytest.mark.parametrize(("name", "transform"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_partition_type_keeps_every_live_file(sqlite_catalog, name, transform):
    typ, values = TYPES[name]
    table, rows = _make_table(sqlite_catalog, f"t_{name}", typ, values, transform)
    assert rows == 7
    avro_type = _partition_avro_type(table)
    if name in DECIMAL_FIXED_SIZE and not isinstance(transform, BucketTransform):
        assert avro_type[1]["type"] == "fixed" and avro_type[1]["size"] == DECIMAL_FIXED_SIZE[name]
    planted = _plant(table)
    counts = snapshot_row_counts(table)
    assert Files(table).all_files(table.location()) - _oracle(table) == planted

    _check_run(table, planted)

    assert snapshot_row_counts(sqlite_catalog.load_table(f"db.t_{name}")) == counts


def test_decimal_partitions_through_worker_processes(sqlite_catalog):
    typ, values = TYPES["decimal38"]
    table, rows = _make_table(sqlite_catalog, "t_pool", typ, values, IdentityTransform())
    planted = _plant(table)
    _check_run(table, planted, processes=2)
    assert len(sqlite_catalog.load_table("db.t_pool").scan().to_arrow()) == rows


def test_decimal_partition_on_a_format_v1_table(sqlite_catalog):
    typ, values = TYPES["decimal19"]
    table, rows = _make_table(sqlite_catalog, "t_v1", typ, values, IdentityTransform(), version=1)
    assert table.metadata.format_version == 1
    planted = _plant(table)
    _check_run(table, planted)
    assert len(sqlite_catalog.load_table("db.t_v1").scan().to_arrow()) == rows


# --- manifests in other writers' encodings ---------------------------------------------------------


def _zigzag(value: int, out: bytearray) -> None:
    n = (value << 1) ^ (value >> 63)
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _len(n: int) -> bytes:
    out = bytearray()
    _zigzag(n, out)
    return bytes(out)


def _unscaled(value: Decimal, scale: int) -> int:
    return int(value.scaleb(scale))


def _encode(schema: Any, value: Any, out: bytearray, names: dict[str, Any]) -> None:
    """A plain Avro encoder, independent of the code under test, for values pyiceberg decoded."""
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, list):
        index = next(i for i, s in enumerate(schema) if (s == "null") == (value is None))
        _zigzag(index, out)
        _encode(schema[index], value, out, names)
        return
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if isinstance(schema, dict) and "name" in schema:
        names[schema["name"]] = schema
    if isinstance(value, Enum):
        value = value.value
    if kind == "null":
        return
    if kind == "boolean":
        out.append(1 if value else 0)
    elif kind in ("int", "long"):
        _zigzag(int(value), out)
    elif kind == "float":
        out += struct.pack("<f", value)
    elif kind == "double":
        out += struct.pack("<d", value)
    elif kind in ("bytes", "string"):
        if logical == "decimal":
            unscaled = _unscaled(value, schema["scale"])
            raw = unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        elif isinstance(value, uuid.UUID):
            raw = str(value).encode()
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)
        _zigzag(len(raw), out)
        out += raw
    elif kind == "fixed":
        if logical == "decimal":
            out += _unscaled(value, schema["scale"]).to_bytes(schema["size"], "big", signed=True)
        else:
            out += value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    elif kind == "record":
        for pos, field in enumerate(schema["fields"]):
            _encode(field["type"], value[pos] if "extra" not in field else field["extra"], out, names)
    elif kind == "array":
        items = list(value.items()) if isinstance(value, Mapping) else list(value)
        if items:
            _zigzag(len(items), out)
            for item in items:
                _encode(schema["items"], item, out, names)
        out.append(0)
    else:
        raise AssertionError(f"no encoder for {kind}")


def _rewrite(path: str, change: Any, declare: Any = None) -> dict[str, Any]:
    """Decode an Avro file with pyiceberg, change its schema, and write it back in the new encoding.

    ``declare`` puts another schema than the one used for the encoding in the header.
    """
    reader = AvroFile(PyArrowFileIO().new_input(path))  # type: ignore[var-annotated]
    with reader:
        records = list(reader)
    meta = dict(reader.header.meta)
    schema = change(json.loads(meta["avro.schema"]))
    meta["avro.schema"] = json.dumps(schema if declare is None else declare)
    meta["avro.codec"] = "null"
    body = bytearray()
    for record in records:
        _encode(schema, record, body, {})
    out = bytearray(b"Obj\x01")
    _zigzag(len(meta), out)
    for key, value in meta.items():
        raw = value.encode() if isinstance(value, str) else value
        _zigzag(len(key), out)
        out += key.encode()
        _zigzag(len(raw), out)
        out += raw
    out.append(0)
    sync = os.urandom(16)
    out += sync
    _zigzag(len(records), out)
    _zigzag(len(body), out)
    out += body + sync
    Path(local_path(path)).write_bytes(bytes(out))
    return schema


def _walk(node: Any, fn: Any) -> Any:
    """Apply ``fn`` to every dict of a JSON schema, bottom up."""
    if isinstance(node, list):
        return [_walk(n, fn) for n in node]
    if isinstance(node, dict):
        return fn({k: _walk(v, fn) for k, v in node.items()})
    return node


def _other_encodings(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("logicalType") == "decimal" and node.get("type") == "fixed":  # plain Avro: decimal as bytes
        return {"type": "bytes", "logicalType": "decimal", "precision": node["precision"], "scale": node["scale"]}
    if node.get("logicalType") == "uuid":  # the Avro spec's uuid: a string
        return {"type": "string", "logicalType": "uuid"}
    if node.get("logicalType") == "timestamp-micros":  # format v3's nanosecond timestamps are longs too
        return {**node, "logicalType": "timestamp-nanos"}
    # The v3 fields of data_file and manifest_file; "extra" is the value _encode writes for them.
    if node.get("name") == "r2":
        extra = [
            {"name": "first_row_id", "field-id": 142, "type": ["null", "long"], "extra": 1 << 40},
            {"name": "referenced_data_file", "field-id": 143, "type": ["null", "string"], "extra": "s3://x/y.parquet"},
            {"name": "content_offset", "field-id": 144, "type": ["null", "long"], "extra": 4},
            {"name": "content_size_in_bytes", "field-id": 145, "type": ["null", "long"], "extra": 1234},
        ]
        return {**node, "fields": node["fields"] + extra}
    if node.get("name") == "manifest_file":
        return {
            **node,
            "fields": [
                *node["fields"],
                {"name": "first_row_id", "field-id": 520, "type": ["null", "long"], "extra": 7},
            ],
        }
    return node


def _check_rewritten(catalog: Catalog, table: Table, expected: list[str]) -> None:
    """Rewrite every manifest list and manifest in the other encodings, then run the engine on them.

    The oracle and the reads afterwards use pyiceberg, which cannot read a bytes decimal or a
    string uuid: they run on the original files, put back after the runs.
    """
    rows = snapshot_row_counts(table)
    planted = _plant(table)
    assert Files(table).all_files(table.location()) - _oracle(table) == planted
    lists = [s.manifest_list for s in table.metadata.snapshots]
    manifests = sorted({m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)})
    originals = {p: Path(local_path(p)).read_bytes() for p in lists + manifests}
    live = {m: live_file_paths(table.io, m) for m in manifests}
    listed = {ml: manifest_paths(table.io, ml) for ml in lists}

    for path in manifests:
        rewritten = json.dumps(_rewrite(path, lambda s: _walk(s, _other_encodings)))
        assert all(text in rewritten for text in expected) and '"field-id": 145' in rewritten
        assert live_file_paths(table.io, path) == live[path]
    for path in lists:
        assert '"field-id": 520' in json.dumps(_rewrite(path, lambda s: _walk(s, _other_encodings)))
        assert manifest_paths(table.io, path) == listed[path]
    for path in lists + manifests:
        _old(path)

    _check_run(table, planted)

    for path, data in originals.items():
        Path(local_path(path)).write_bytes(data)
    assert snapshot_row_counts(catalog.load_table(table.name())) == rows


def test_manifests_with_decimals_as_bytes_timestamp_nanos_and_v3_fields(sqlite_catalog):
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "d9", DecimalType(9, 2), required=False),
        NestedField(3, "d38", DecimalType(38, 10), required=False),
        NestedField(4, "d38b", DecimalType(38, 10), required=False),
        NestedField(5, "ts", TimestampType(), required=False),
        NestedField(6, "s", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "d9"),
        PartitionField(3, 1001, IdentityTransform(), "d38"),
        PartitionField(4, 1002, TruncateTransform(10), "d38b_trunc"),  # a second decimal(38, 10) partition value
        PartitionField(5, 1003, IdentityTransform(), "ts"),
        PartitionField(6, 1004, IdentityTransform(), "s"),
    )
    table = sqlite_catalog.create_table("db.other", schema=schema, partition_spec=spec)
    arrow = schema_to_pyarrow(schema)
    d9, d38 = TYPES["decimal9"][1], TYPES["decimal38"][1]
    for batch in range(2):
        table.append(
            pa.Table.from_pylist(
                [
                    {
                        "id": i,
                        "d9": d9[i % 3],
                        "d38": d38[i % 3],
                        "d38b": d38[(i + 1) % 3],
                        "ts": datetime(2024, 1, 1 + i),
                        "s": f"s{i}",
                    }
                    for i in range(batch * 3, batch * 3 + 3)
                ],
                schema=arrow,
            )
        )
    table.overwrite(pa.Table.from_pylist([{"id": 9, "d9": d9[0]}], schema=arrow), overwrite_filter="id < 2")
    table = sqlite_catalog.load_table("db.other")
    _check_rewritten(
        sqlite_catalog,
        table,
        [
            '"type": "bytes", "logicalType": "decimal", "precision": 38',
            '"type": "bytes", "logicalType": "decimal", "precision": 9',
            '"timestamp-nanos"',
        ],
    )


def test_manifests_with_uuids_as_strings(sqlite_catalog):
    typ, values = TYPES["uuid"]
    table, _ = _make_table(sqlite_catalog, "t_uuid_string", typ, values, IdentityTransform())
    assert _partition_avro_type(table)[1]["type"] == "fixed"  # pyiceberg's encoding; the rewrite makes it a string
    _check_rewritten(sqlite_catalog, table, ['"type": "string", "logicalType": "uuid"'])


# --- damaged files: an error, never a crash ----------------------------------------------------------

_FUZZ = textwrap.dedent("""
    import json, random, sys
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from airflow_iceberg_maint.errors import MetadataReadError
    from airflow_iceberg_maint.reachability.manifests import live_file_paths, manifest_paths
    source, scratch, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    read = live_file_paths if kind == "manifest" else manifest_paths
    io = PyArrowFileIO()
    data = open(source, "rb").read()
    good = read(io, source)
    rng = random.Random(9)
    variants = [data[:n] for n in range(len(data))]
    for _ in range(1500):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        variants.append(bytes(bad))
    counts = {"error": 0, "same": 0, "other": 0, "short": 0}
    for variant in variants:
        open(scratch, "wb").write(variant)
        try:
            got = read(io, scratch)
        except MetadataReadError:
            counts["error"] += 1
            continue
        if got == good:
            counts["same"] += 1
        elif len(variant) < len(data):
            assert got == good[:len(got)], "a truncated file read as something else than a prefix"
            counts["short"] += 1
        else:
            counts["other"] += 1
    print(json.dumps(counts))
""")


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a script in a child process: a crash there is a failed assertion here, not a dead test run."""
    return subprocess.run([sys.executable, "-c", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("codec", ["deflate", "null"])
@pytest.mark.parametrize("kind", ["manifest", "manifest_list"])
def test_damaged_files_are_read_errors_never_crashes(sqlite_catalog, tmp_path, kind, codec):
    """Truncated at every byte, and 1,500 random corruptions, of a decimal-partitioned table's files.

    pyiceberg writes deflate, where most corruptions break the compression; the uncompressed
    copy puts them in the Avro encoding itself.
    """
    typ, values = TYPES["decimal38"]
    table, _ = _make_table(sqlite_catalog, "t_fuzz", typ, values, IdentityTransform())
    snapshot = table.current_snapshot()
    assert snapshot is not None
    source = snapshot.manifest_list if kind == "manifest_list" else snapshot.manifests(table.io)[0].manifest_path
    if codec == "null":
        _rewrite(source, lambda schema: schema)
    local = tmp_path / "source.avro"
    shutil.copy(local_path(source), local)
    done = _child(_FUZZ, str(local), str(tmp_path / "scratch.avro"), kind)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout)
    assert counts["error"] > 0 and counts["same"] > 0
    assert sum(counts.values()) == local.stat().st_size + 1500


_READ_ONE = textwrap.dedent("""
    import sys
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from airflow_iceberg_maint.errors import MetadataReadError
    from airflow_iceberg_maint.reachability.manifests import live_file_paths
    try:
        print(live_file_paths(PyArrowFileIO(), sys.argv[1]))
    except MetadataReadError as exc:
        print(exc)
""")


@pytest.mark.parametrize("length", [50_000_000, -50_000_000])
def test_a_length_past_its_block_is_a_read_error_not_a_crash(sqlite_catalog, tmp_path, length):
    """A path's length prefix made 50 MB (or negative), in an uncompressed manifest of a few KB."""
    typ, values = TYPES["decimal38"]
    table, _ = _make_table(sqlite_catalog, "t_length", typ, values, IdentityTransform())
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path
    _rewrite(manifest, lambda schema: schema)
    data = Path(local_path(manifest)).read_bytes()
    path = live_file_paths(table.io, manifest)[0].encode()
    prefix, bad = _len(len(path)), _len(length)
    assert data.count(prefix + path) == 1 and len(bad) > len(prefix)
    broken = tmp_path / "broken.avro"
    broken.write_bytes(data.replace(prefix + path, bad + path[len(bad) - len(prefix) :], 1))  # same size

    done = _child(_READ_ONE, str(broken))

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"manifest '{broken}': cannot be read (a length of {length} bytes runs past the end of its block)"
    )


def test_an_encoding_that_disagrees_with_the_schema_is_a_read_error(sqlite_catalog):
    """A header that says ``fixed`` for decimals stored as ``bytes``: the skips go wrong, and that is found."""
    typ, values = TYPES["decimal38"]
    table, _ = _make_table(sqlite_catalog, "t_lie", typ, values, IdentityTransform())
    manifest = table.current_snapshot().manifests(table.io)[0].manifest_path
    _rewrite(manifest, lambda s: _walk(s, _other_encodings), declare=_manifest_schema(table, manifest))
    with pytest.raises(MetadataReadError, match="cannot be read"):
        live_file_paths(table.io, manifest)
