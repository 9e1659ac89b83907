"""The scratch space of a sharded orphan scan: small Parquet parts bucketed by hash range, and JSON markers.

Every step of a sharded scan writes here and the next step reads it back; XCom only carries
the scratch URI and counts. Scratch is never inside the table location: its files would be
listed as orphans of the table (and deleted by the very run that needs them).

Rows are bucketed by the path key's hash (``path_hashes``): a path and every other spelling of
it that a path key finds have one key, so one bucket holds everything that can match them.
Bucket ``b`` of ``n`` holds the keys whose top 32 bits, as an unsigned number ``t``, satisfy
``t * n >> 32 == b``: consecutive hash ranges of equal width.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io

from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError, MetadataReadError, StorageError
from airflow_iceberg_maint.fs.locations import validate_location

#: Listed candidates: the exact bytes of the path (a local name need not be UTF-8) and the size.
CANDIDATE_SCHEMA = pa.schema([("path", pa.binary()), ("size", pa.int64())])
FLUSH_ROWS = 250_000  # rows a writer holds before it writes its buckets out


def refuse_scratch_inside(scratch: str, table_location: str) -> None:
    """Scratch files under the table location would be listed as the table's orphans."""
    try:
        validate_location(scratch, table_location)
    except LocationRefusedError:
        return
    raise InvalidInputError(f"scratch location {scratch!r}: is inside the table location {table_location!r}")


def buckets_of(keys: pa.Array | np.ndarray, buckets: int) -> np.ndarray:
    """The hash-range bucket of each 64-bit key."""
    top = np.asarray(keys, dtype=np.int64).view(np.uint64) >> np.uint64(32)
    return ((top * np.uint64(buckets)) >> np.uint64(32)).astype(np.int64)


class Scratch:
    """Reads and writes one scan's scratch files (local or object storage, through pyiceberg's FileIO)."""

    def __init__(self, uri: str, io_properties: Mapping[str, str]) -> None:
        self.uri = uri.rstrip("/")
        self._io: FileIO = load_file_io(dict(io_properties), self.uri)

    def location(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def write(self, name: str, data: bytes) -> str:
        location = self.location(name)
        try:
            if location.startswith("file://") or "://" not in location:
                os.makedirs(os.path.dirname(location.removeprefix("file://")), exist_ok=True)
            with self._io.new_output(location).create(overwrite=True) as out:
                out.write(data)
        except Exception as exc:  # the step fails; the steps after it find no marker (S2)
            raise StorageError(f"scratch file {location!r}: cannot be written ({type(exc).__name__}: {exc})") from exc
        return location

    def read(self, name: str) -> bytes:
        """A scratch file; a missing or unreadable one fails the step (S2)."""
        location = self.location(name)
        try:
            with self._io.new_input(location).open() as f:
                return f.read()
        except Exception as exc:
            raise MetadataReadError(f"scratch file {location!r}: cannot be read ({type(exc).__name__}: {exc})") from exc

    def write_json(self, name: str, body: Mapping[str, Any]) -> str:
        return self.write(name, json.dumps(body).encode("utf-8"))

    def read_json(self, name: str) -> dict[str, Any]:
        try:
            body = json.loads(self.read(name))
        except ValueError as exc:
            raise MetadataReadError(f"scratch file {self.location(name)!r}: is not JSON ({exc})") from exc
        if not isinstance(body, dict):
            raise MetadataReadError(f"scratch file {self.location(name)!r}: expected a JSON object")
        return body

    def write_table(self, name: str, table: pa.Table) -> str:
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        return self.write(name, sink.getvalue())

    def read_table(self, name: str, schema: pa.Schema) -> pa.Table:
        try:
            table = pq.read_table(pa.BufferReader(self.read(name)))
        except pa.ArrowException as exc:
            raise MetadataReadError(f"scratch file {self.location(name)!r}: is not Parquet ({exc})") from exc
        if not table.schema.equals(schema):
            raise MetadataReadError(f"scratch file {self.location(name)!r}: schema {table.schema} is not {schema}")
        return table


class BucketWriter:
    """Spreads rows over hash-range buckets and writes them as Parquet parts, holding a bounded number of rows."""

    def __init__(self, scratch: Scratch, kind: str, owner: str, buckets: int, schema: pa.Schema) -> None:
        self.scratch, self.kind, self.owner, self.buckets, self.schema = scratch, kind, owner, buckets, schema
        self.parts: dict[int, list[str]] = {}
        self.rows = 0
        self._held: dict[int, list[pa.Table]] = {}
        self._held_rows = 0

    def add(self, rows: pa.Table | pa.RecordBatch, keys: pa.Array | np.ndarray) -> None:
        if not len(rows):
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        bucket = buckets_of(keys, self.buckets)
        order = np.argsort(bucket, kind="stable")
        sorted_rows = table.take(pa.array(order))
        counts = np.bincount(bucket, minlength=self.buckets)
        start = 0
        for b in np.nonzero(counts)[0]:
            self._held.setdefault(int(b), []).append(sorted_rows.slice(start, int(counts[b])))
            start += int(counts[b])
        self.rows += len(table)
        self._held_rows += len(table)
        if self._held_rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        for b, tables in sorted(self._held.items()):
            parts = self.parts.setdefault(b, [])
            name = f"{self.kind}/b{b:05d}/{self.owner}-{len(parts):05d}.parquet"
            self.scratch.write_table(name, pa.concat_tables(tables).cast(self.schema))
            parts.append(name)
        self._held, self._held_rows = {}, 0

    def to_json(self) -> dict[str, list[str]]:
        """The parts written, by bucket (JSON keys are strings)."""
        return {str(b): names for b, names in sorted(self.parts.items())}
