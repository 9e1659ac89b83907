"""Reading an S3 Inventory report: its ``manifest.json`` and the CSV, ORC or Parquet data files it names.

The format is AWS's: the manifest gives ``fileFormat``, ``fileSchema`` (for CSV, the column
names in order: the data files have no header), ``files[].key`` (keys in the destination bucket)
and ``creationTimestamp`` (milliseconds since 1970, when the inventory was taken). CSV data files
are gzipped and their keys are URL-encoded; ORC and Parquet files carry their own schema, with
the columns in snake case. Every data file becomes record batches of ``bucket``, ``key`` (decoded),
``size`` and ``last_modified`` (UTC), one row per current object: when the inventory includes
every version, only the latest version that is not a delete marker is an object that exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote_plus

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv, orc
from pyarrow import parquet as pq

from airflow_iceberg_maint.errors import InvalidInputError

FORMATS = ("CSV", "ORC", "Parquet")
#: The fields a listing needs, by their CSV name (``fileSchema``) and their ORC / Parquet column name.
NEEDED = {"Bucket": "bucket", "Key": "key", "Size": "size", "LastModifiedDate": "last_modified_date"}
#: Present only when the inventory includes every version of each object.
VERSION_FIELDS = {"IsLatest": "is_latest", "IsDeleteMarker": "is_delete_marker"}
BATCH_ROWS = 64 * 1024
OBJECT_SCHEMA = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class Manifest:
    """What a listing needs from ``manifest.json``: where the data files are, how to read them, and when."""

    file_format: str  # one of FORMATS
    csv_columns: list[str]  # the CSV columns in order (fileSchema); empty for ORC and Parquet
    data_files: list[str]  # the data files' locations, in the manifest's order
    created: datetime


def _field(body: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in body:
        raise InvalidInputError(f"listing {where}: not an S3 Inventory manifest: no {name!r}")
    return body[name]


def _created(value: Any, where: str) -> datetime:
    try:
        millis = int(value)
        return datetime.fromtimestamp(millis / 1000, UTC)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise InvalidInputError(
            f"listing {where}: creationTimestamp {value!r} is not a time in milliseconds since 1970"
        ) from exc


def _data_location(manifest_uri: str, destination: str, key: str, local_dir: str | None) -> str:
    """Where a data file named by the manifest is read from.

    On an object store, ``files[].key`` is a key of the destination bucket. A manifest on local disk
    is a copy of the report's folder ``<config-ID>/<date>/manifest.json``: its data files are read
    from ``<config-ID>/data/`` beside it, as the report lays them out.
    """
    if local_dir is None:
        scheme = manifest_uri.split("://", 1)[0]
        return f"{scheme}://{destination}/{key}"
    _, sep, tail = key.rpartition("/data/")
    if not sep and not key.startswith("data/"):
        raise InvalidInputError(
            f"listing {manifest_uri}: data file {key!r} is not under a data/ folder, so it cannot be found "
            "beside a manifest on local disk"
        )
    name = tail if sep else key.removeprefix("data/")
    return str(PurePosixPath(local_dir).parent / "data" / name)


def parse_manifest(text: bytes, manifest_uri: str, local_dir: str | None) -> Manifest:
    """Check and read a manifest; ``local_dir``: the folder holding it when it is on local disk."""
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(f"listing {manifest_uri}: not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise InvalidInputError(f"listing {manifest_uri}: not an S3 Inventory manifest (not a JSON object)")
    file_format = str(_field(body, "fileFormat", manifest_uri))
    by_name = {f.lower(): f for f in FORMATS}
    if file_format.lower() not in by_name:
        raise InvalidInputError(
            f"listing {manifest_uri}: fileFormat {file_format!r}: expected one of {', '.join(FORMATS)}"
        )
    file_format = by_name[file_format.lower()]
    columns: list[str] = []
    if file_format == "CSV":
        columns = [c.strip() for c in str(_field(body, "fileSchema", manifest_uri)).split(",")]
        missing = [name for name in NEEDED if name not in columns]
        if missing:
            raise InvalidInputError(
                f"listing {manifest_uri}: fileSchema lacks {', '.join(missing)}, which a listing needs"
            )
    destination = str(body.get("destinationBucket", "")).removeprefix("arn:aws:s3:::")
    files = _field(body, "files", manifest_uri)
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("key"), str) for f in files):
        raise InvalidInputError(f"listing {manifest_uri}: files must be a list of objects with a key")
    if local_dir is None and not destination:
        raise InvalidInputError(f"listing {manifest_uri}: no destinationBucket to read the data files from")
    data = [_data_location(manifest_uri, destination, f["key"], local_dir) for f in files]
    return Manifest(file_format, columns, data, _created(_field(body, "creationTimestamp", manifest_uri), manifest_uri))


def _utc(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A timestamp column as microseconds in UTC; a time without a zone is read as UTC."""
    kind = column.type
    if pa.types.is_timestamp(kind) and kind.tz is None:
        column = pc.assume_timezone(column, "UTC")
    return column.cast(pa.timestamp("us", tz="UTC"))


def _current(batch: pa.RecordBatch | pa.Table, latest: str, marker: str) -> pa.RecordBatch | pa.Table:
    """Rows of objects that exist: the latest version, not a delete marker (absent columns: every row)."""
    names = batch.schema.names
    keep = None
    if latest in names:
        keep = pc.fill_null(pc.equal(batch[latest].cast(pa.bool_()), True), True)
    if marker in names:
        live = pc.invert(pc.fill_null(pc.equal(batch[marker].cast(pa.bool_()), True), False))
        keep = live if keep is None else pc.and_(keep, live)
    return batch if keep is None else batch.filter(keep)


def _objects(batch: pa.RecordBatch | pa.Table, names: Mapping[str, str], decode: bool) -> pa.RecordBatch:
    keys = batch[names["Key"]].to_pylist()
    if decode:  # CSV keys are URL-encoded, a space as '+'; ORC and Parquet keys are not encoded
        keys = [None if k is None else unquote_plus(k) for k in keys]
    return pa.RecordBatch.from_arrays(
        [
            batch[names["Bucket"]].cast(pa.string()),
            pa.array(keys, pa.string()),
            batch[names["Size"]].cast(pa.int64()),
            _utc(batch[names["LastModifiedDate"]]),
        ],
        schema=OBJECT_SCHEMA,
    )


def _csv_batches(fs: Any, path: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    wanted = [c for c in columns if c in NEEDED or c in VERSION_FIELDS]
    types = {"Bucket": pa.string(), "Key": pa.string(), "Size": pa.int64(), "LastModifiedDate": pa.string()}
    types.update({name: pa.string() for name in VERSION_FIELDS})
    convert = csv.ConvertOptions(column_types=types, include_columns=wanted, strings_can_be_null=True)
    read = csv.ReadOptions(column_names=columns, block_size=8 << 20)
    with fs.open_input_stream(path, compression="detect") as stream:
        for batch in csv.open_csv(stream, read_options=read, convert_options=convert):
            flags = {name: pc.equal(pc.utf8_lower(batch[name]), "true") for name in VERSION_FIELDS if name in wanted}
            for name, flag in flags.items():
                batch = batch.set_column(batch.schema.get_field_index(name), name, flag)
            batch = _current(batch, "IsLatest", "IsDeleteMarker")
            # An ISO 8601 time with its 'Z', as S3 writes it; parsed here, where an error can name the file.
            try:
                parsed = batch["LastModifiedDate"].cast(pa.timestamp("ms", tz="UTC"))
            except pa.ArrowInvalid as exc:
                raise InvalidInputError(f"listing data file {path}: LastModifiedDate: {exc}") from exc
            batch = batch.set_column(batch.schema.get_field_index("LastModifiedDate"), "LastModifiedDate", parsed)
            yield _objects(batch, {n: n for n in NEEDED}, decode=True)


def _columnar(kind: str, fs: Any, path: str) -> Iterator[pa.RecordBatch]:
    with fs.open_input_file(path) as handle:
        if kind == "ORC":
            reader = orc.ORCFile(handle)
            present = set(reader.schema.names)
            parts: Iterator[pa.RecordBatch | pa.Table] = (
                reader.read_stripe(i, columns=_columns(present, path)) for i in range(reader.nstripes)
            )
        else:
            parquet = pq.ParquetFile(handle)
            present = set(parquet.schema_arrow.names)
            parts = parquet.iter_batches(batch_size=BATCH_ROWS, columns=_columns(present, path))
        for part in parts:
            current = _current(part, "is_latest", "is_delete_marker")
            yield _objects(current, NEEDED, decode=False)


def _columns(present: set[str], path: str) -> list[str]:
    missing = [name for name in NEEDED.values() if name not in present]
    if missing:
        raise InvalidInputError(f"listing data file {path}: no column {', '.join(missing)}, which a listing needs")
    return [*NEEDED.values(), *(name for name in VERSION_FIELDS.values() if name in present)]


def object_batches(manifest: Manifest, fs: Any, path_of: Any) -> Iterator[pa.RecordBatch]:
    """Every current object the report lists, as OBJECT_SCHEMA batches; ``path_of`` maps a location to ``fs``'s path."""
    for location in manifest.data_files:
        path = path_of(location)
        if manifest.file_format == "CSV":
            yield from _csv_batches(fs, path, manifest.csv_columns)
        else:
            yield from _columnar(manifest.file_format, fs, path)
