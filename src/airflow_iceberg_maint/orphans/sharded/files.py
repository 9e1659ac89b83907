"""The scratch space of a sharded orphan scan: Parquet parts sorted by hash-range bucket, and JSON markers.

Every step of a sharded scan writes here and the next step reads it back; XCom only carries
the scratch URI and counts. Scratch is never inside the table location: its files would be
listed as orphans of the table (and deleted by the very run that needs them).

Rows are bucketed by the path key's hash (``path_hashes``): a path and every other spelling of
it that a path key finds have one key, so one bucket holds everything that can match them.
Bucket ``b`` of ``n`` holds the keys whose top 32 bits, as an unsigned number ``t``, satisfy
``t * n >> 32 == b``: consecutive hash ranges of equal width.

A writer writes one part a flush, whatever the number of buckets: its rows sorted by bucket, a
row group a bucket, and the bucket of each row group in the footer. A match task owns a
contiguous range of buckets, so it fetches one contiguous byte range of each part (pyarrow's
pre-buffered read of the row groups: ranged GETs on object storage).

Every part belongs to one plan: its name holds the plan id and its footer says it again. A task of
a cleared plan that still runs (a zombie) writes under its own plan's names, never over a part of
the plan that replaced it; a part whose footer names another plan fails the reader (S2).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from itertools import accumulate
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io

from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError, MetadataReadError, StorageError
from airflow_iceberg_maint.fs.locations import validate_location

#: Listed candidates: the exact bytes of the path (a local name need not be UTF-8) and the size.
CANDIDATE_SCHEMA = pa.schema([("path", pa.binary()), ("size", pa.int64())])
FLUSH_ROWS = 250_000  # rows a writer holds before it writes them out as one part
BUCKETS_KEY = b"buckets"  # a part's footer metadata: the bucket of each row group, as a JSON list
PLAN_KEY = b"plan"  # a part's footer metadata: the id of the plan that wrote it


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


def bucket_range(index: int, shards: int, buckets: int) -> range:
    """The contiguous buckets that match task ``index`` of ``shards`` owns."""
    return range(index * buckets // shards, (index + 1) * buckets // shards)


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

    def write_table(self, name: str, table: pa.Table, plan_id: str) -> str:
        sink = io.BytesIO()
        pq.write_table(table.replace_schema_metadata({PLAN_KEY: plan_id.encode()}), sink, compression="zstd")
        return self.write(name, sink.getvalue())

    def read_table(self, name: str, schema: pa.Schema, plan_id: str) -> pa.Table:
        try:
            table = pq.read_table(pa.BufferReader(self.read(name)))
        except pa.ArrowException as exc:
            raise MetadataReadError(f"scratch file {self.location(name)!r}: is not Parquet ({exc})") from exc
        if not table.schema.equals(schema):
            raise MetadataReadError(f"scratch file {self.location(name)!r}: schema {table.schema} is not {schema}")
        _refuse_other_plan(table.schema, self.location(name), plan_id)
        return table

    def write_part(self, name: str, table: pa.Table, buckets: np.ndarray, plan_id: str) -> str:
        """Rows sorted by their ``buckets``, written as a row group a bucket."""
        present, starts = np.unique(buckets, return_index=True)
        ends = [*starts[1:].tolist(), len(table)]
        schema = table.schema.with_metadata(
            {BUCKETS_KEY: json.dumps(present.tolist()).encode(), PLAN_KEY: plan_id.encode()}
        )
        sink = io.BytesIO()
        # No statistics: nothing reads them, and the footer (read by each match task) stays small.
        with pq.ParquetWriter(sink, schema, compression="zstd", write_statistics=False) as writer:
            for start, end in zip(starts.tolist(), ends, strict=True):
                writer.write_table(table.slice(start, end - start), row_group_size=end - start)
        return self.write(name, sink.getvalue())

    def read_buckets(self, name: str, schema: pa.Schema, wanted: range, plan_id: str) -> Iterator[tuple[int, pa.Table]]:
        """The rows of plan ``plan_id``'s part in the ``wanted`` buckets, by bucket; only their row groups are read."""
        location = self.location(name)
        try:
            with self._io.new_input(location).open() as f:
                part = pq.ParquetFile(f, pre_buffer=True)  # adjacent row groups: one ranged read
                buckets = _part_buckets(part, location, schema)
                _refuse_other_plan(part.schema_arrow, location, plan_id)
                groups = [i for i, b in enumerate(buckets) if b in wanted]
                table = part.read_row_groups(groups) if groups else schema.empty_table()
        except MetadataReadError:
            raise
        except Exception as exc:
            raise MetadataReadError(f"scratch file {location!r}: cannot be read ({type(exc).__name__}: {exc})") from exc
        start = 0
        for group in groups:
            rows = part.metadata.row_group(group).num_rows
            yield buckets[group], table.slice(start, rows)
            start += rows


def _refuse_other_plan(schema: pa.Schema, location: str, plan_id: str) -> None:
    """A part written by another plan (a zombie task of a cleared one) is never read as this plan's (S2)."""
    written = (schema.metadata or {}).get(PLAN_KEY, b"").decode("utf-8", "replace")
    if written != plan_id:
        raise MetadataReadError(
            f"scratch file {location!r}: belongs to plan {written or '(none)'}, not to plan {plan_id}"
        )


def part_name(kind: str, plan_id: str, owner: str, number: int) -> str:
    """A part's name: its plan's id first, so no task of another plan can write over it."""
    return f"{kind}/{plan_id}-{owner}-{number:05d}.parquet"


def _part_buckets(part: pq.ParquetFile, location: str, schema: pa.Schema) -> list[int]:
    """The bucket of each row group: strictly increasing, as the writer wrote them (S2: anything else fails)."""
    if not part.schema_arrow.equals(schema):
        raise MetadataReadError(f"scratch file {location!r}: schema {part.schema_arrow} is not {schema}")
    try:
        buckets = json.loads((part.schema_arrow.metadata or {})[BUCKETS_KEY])
    except (KeyError, ValueError) as exc:
        raise MetadataReadError(f"scratch file {location!r}: has no bucket list ({exc})") from exc
    ordered = all(isinstance(b, int) for b in buckets) and buckets == sorted(set(buckets))
    if not ordered or len(buckets) != part.num_row_groups:
        raise MetadataReadError(f"scratch file {location!r}: its bucket list does not fit its row groups")
    return cast("list[int]", buckets)


class BucketRange:
    """One match task's buckets of every part, fetched once a part and kept on local disk.

    Each part's rows of the range come in one ranged read and go to a local Arrow IPC file, in
    bucket order; the match then takes one bucket at a time from every file. So the task holds
    one bucket (and one part's slice while fetching), never the whole range.
    """

    def __init__(self, scratch: Scratch, schema: pa.Schema, wanted: range, directory: str, plan_id: str) -> None:
        self.scratch, self.schema, self.wanted, self.directory = scratch, schema, wanted, directory
        self.plan_id = plan_id
        self._files: list[tuple[str, list[int]]] = []  # local file, first batch of each wanted bucket (+ the end)
        os.makedirs(directory, exist_ok=True)

    def fetch(self, names: Iterable[str]) -> None:
        for name in names:
            counts = [0] * len(self.wanted)  # batches of each wanted bucket, written in bucket order
            path = os.path.join(self.directory, f"{len(self._files):06d}.arrow")
            try:
                with pa.ipc.new_file(path, self.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as out:
                    for bucket, rows in self.scratch.read_buckets(name, self.schema, self.wanted, self.plan_id):
                        for batch in rows.to_batches():
                            out.write_batch(batch)
                            counts[bucket - self.wanted.start] += 1
            except OSError as exc:
                raise StorageError(f"local file {path!r}: cannot be written ({exc})") from exc
            if any(counts):
                self._files.append((path, list(accumulate(counts, initial=0))))

    def batches(self, bucket: int) -> Iterator[pa.RecordBatch]:
        """Every fetched row of ``bucket``."""
        i = bucket - self.wanted.start
        for path, firsts in self._files:
            if firsts[i] < firsts[i + 1]:
                with pa.OSFile(path) as source:
                    reader = pa.ipc.open_file(source)
                    for n in range(firsts[i], firsts[i + 1]):
                        yield reader.get_batch(n)


class BucketWriter:
    """Holds rows with their hash-range buckets and writes them as one part a flush (at most ``FLUSH_ROWS`` held)."""

    def __init__(self, scratch: Scratch, kind: str, owner: str, buckets: int, schema: pa.Schema, plan_id: str) -> None:
        self.scratch, self.kind, self.owner, self.buckets, self.schema = scratch, kind, owner, buckets, schema
        self.plan_id = plan_id
        self.parts: list[str] = []
        self.rows = 0
        self._held: list[tuple[pa.Table, np.ndarray]] = []
        self._held_rows = 0

    def add(self, rows: pa.Table | pa.RecordBatch, keys: pa.Array | np.ndarray) -> None:
        if not len(rows):
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        self._held.append((table, buckets_of(keys, self.buckets)))
        self.rows += len(table)
        self._held_rows += len(table)
        if self._held_rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return
        table = pa.concat_tables(t for t, _ in self._held).cast(self.schema)
        buckets = np.concatenate([b for _, b in self._held])
        order = np.argsort(buckets, kind="stable")  # within a bucket, rows keep the order they came in
        name = part_name(self.kind, self.plan_id, self.owner, len(self.parts))
        self.scratch.write_part(name, table.take(pa.array(order)), buckets[order], self.plan_id)
        self.parts.append(name)
        self._held, self._held_rows = [], 0
