"""A listing read from an inventory instead of listing storage (``listing=``, ``--listing``).

The source is an S3 Inventory report (its ``manifest.json``: ``s3_inventory``) or a plain
Parquet or CSV file with the columns ``path``, ``size``, ``last_modified`` (a CSV file with a
header naming them). ``InventoryListing.list_files`` yields the records a storage listing
yields (``FileInfo``), so the scan is otherwise the same (S17 of docs/safety.md):

- a file it names outside the scan location, or below a hidden folder, is ignored as a storage
  listing would skip it; a file missing from it is never a candidate, so it is kept;
- its own time (the manifest's ``creationTimestamp``; a plain file's modification time) bounds
  the cutoff: a file newer than the inventory cannot be in it, so a later cutoff is refused
  before anything is read or deleted;
- a file it lists that is gone by the time of deleting counts as deleted (every backend's
  ``delete_files``), and one a later commit references is kept by the matching or the re-check.

Files are read with pyarrow's readers, through pyarrow's filesystem for the source's location
(local disk, or a store configured with the table's FileIO properties). No LIST request is made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv
from pyarrow import fs as pafs
from pyarrow import parquet as pq

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import FileInfo, KeepComponent
from airflow_iceberg_maint.orphans.listing.s3_inventory import BATCH_ROWS, object_batches, parse_manifest

log = logging.getLogger(__name__)

S3_SCHEMES = ("s3", "s3a", "s3n")
PLAIN_COLUMNS = ("path", "size", "last_modified")
PLAIN_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("last_modified", pa.timestamp("us", tz="UTC"))])

#: Batches of PLAIN_SCHEMA, already narrowed to the files below the given scan root.
Batches = Callable[[str], Iterator[pa.RecordBatch]]


def filesystem(location: str, props: Mapping[str, str]) -> tuple[Any, str]:
    """pyarrow's filesystem for a location and the location's path in it (the table's FileIO settings)."""
    uri = Uri.parse(location)
    if uri.is_local:
        return pafs.LocalFileSystem(), uri.path
    from pyiceberg.io.pyarrow import PyArrowFileIO

    try:
        fs = PyArrowFileIO(dict(props)).fs_by_scheme(uri.scheme, uri.authority)
    except ValueError as exc:
        raise InvalidInputError(f"listing {location}: cannot be read ({exc})") from exc
    return fs, f"{uri.authority}{uri.path}"


def to_utc(column: pa.Array | pa.ChunkedArray, where: str) -> pa.Array | pa.ChunkedArray:
    """Times as microseconds in UTC: a timestamp, or ISO 8601 text; without a zone, a time is UTC."""
    try:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            try:
                column = column.cast(pa.timestamp("us", tz="UTC"))
            except pa.ArrowInvalid:  # no zone in the text
                column = column.cast(pa.timestamp("us"))
        if not pa.types.is_timestamp(column.type):
            raise InvalidInputError(f"listing {where}: last_modified is {column.type}, expected a time")
        if column.type.tz is None:
            column = pc.assume_timezone(column, "UTC")
        return column.cast(pa.timestamp("us", tz="UTC"))
    except pa.ArrowInvalid as exc:
        raise InvalidInputError(f"listing {where}: last_modified: {exc}") from exc


def _respelled(paths: pa.Array, scheme: str) -> pa.Array:
    """S3 paths spelled ``s3a://`` or ``s3n://`` name the same objects as ``s3://``: spell them as the root does."""
    if scheme not in S3_SCHEMES:
        return paths
    return pc.replace_substring_regex(paths, pattern="^s3[an]?://", replacement=f"{scheme}://")


def _plain_batches(fs: Any, path: str, where: str) -> Iterator[pa.RecordBatch]:
    if path.endswith(".parquet"):
        with fs.open_input_file(path) as handle:
            parquet = pq.ParquetFile(handle)
            missing = [c for c in PLAIN_COLUMNS if c not in parquet.schema_arrow.names]
            if missing:
                raise InvalidInputError(
                    f"listing {where}: no column {', '.join(missing)} (expected path, size, last_modified)"
                )
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(PLAIN_COLUMNS)):
                yield _plain(batch, where)
        return
    convert = csv.ConvertOptions(
        column_types={"path": pa.string(), "size": pa.int64(), "last_modified": pa.string()},
        include_columns=list(PLAIN_COLUMNS),
    )
    with fs.open_input_stream(path, compression="detect") as stream:
        try:
            reader = csv.open_csv(stream, convert_options=convert)
            for batch in reader:
                yield _plain(batch, where)
        except (pa.ArrowInvalid, KeyError) as exc:
            raise InvalidInputError(
                f"listing {where}: not a CSV file with a header path,size,last_modified ({exc})"
            ) from exc


def _plain(batch: pa.RecordBatch, where: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [batch["path"].cast(pa.string()), batch["size"].cast(pa.int64()), to_utc(batch["last_modified"], where)],
        schema=PLAIN_SCHEMA,
    )


def _under(batches: Iterator[pa.RecordBatch], root: str) -> Iterator[pa.RecordBatch]:
    """Rows whose path lies below ``root``, spelled as the root's scheme spells it."""
    uri = Uri.parse(root)
    prefix = root.rstrip("/") + "/"  # a trailing '/' so that 't' never takes 't_backup/'
    for batch in batches:
        paths = _respelled(batch["path"], uri.scheme)
        batch = batch.set_column(0, "path", paths)
        yield batch.filter(pc.fill_null(pc.starts_with(paths, prefix), False))


def _s3_under(batches: Iterator[pa.RecordBatch], root: str) -> Iterator[pa.RecordBatch]:
    """An S3 Inventory's objects below ``root``, as paths spelled with the root's scheme and bucket."""
    uri = Uri.parse(root.rstrip("/"))
    base = uri.path.lstrip("/") + "/"
    head = f"{uri.scheme}://{uri.authority}/"
    for batch in batches:
        inside = pc.and_(pc.equal(batch["bucket"], uri.authority), pc.starts_with(batch["key"], base))
        batch = batch.filter(pc.fill_null(inside, False))
        paths = pc.binary_join_element_wise(head, batch["key"], "")
        yield pa.RecordBatch.from_arrays([paths, batch["size"], batch["last_modified"]], schema=PLAIN_SCHEMA)


@dataclass
class InventoryListing:
    """A listing source with the storage listing's ``list_files`` and ``list_calls`` (always 0)."""

    source: str
    listed_at: datetime  # when the inventory was taken: no file newer than this can be in it
    batches: Batches
    list_calls: int = 0

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        prefix = root.rstrip("/") + "/"
        for batch in self.batches(root):
            paths = batch["path"].to_pylist()
            sizes = batch["size"].to_pylist()
            times = batch["last_modified"].to_pylist()
            for path, size, mtime in zip(paths, sizes, times, strict=True):
                # Keys ending in '/' are folder markers, and hidden names are skipped, as a storage listing does.
                if path.endswith("/") or not all(keep(part) for part in path[len(prefix) :].split("/")):
                    continue
                yield FileInfo(path, size or 0, mtime)


def _modified(fs: Any, path: str, where: str) -> datetime:
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise InvalidInputError(f"listing {where}: does not exist")
    if info.mtime is None:
        raise InvalidInputError(f"listing {where}: its store gives no modification time, so its age is unknown")
    mtime: datetime = info.mtime
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=UTC)


def read_source(source: str, root: str, props: Mapping[str, str]) -> InventoryListing:
    """Open a listing source: check its kind and read its time; its rows are read by ``list_files``."""
    fs, path = filesystem(source, props)
    where = source
    if path.endswith(".json"):
        if Uri.parse(root).scheme not in S3_SCHEMES:
            raise InvalidInputError(f"listing {where}: an S3 Inventory lists S3 buckets; the scan location is {root}")
        _modified(fs, path, where)  # refuses a manifest that does not exist, naming it
        with fs.open_input_stream(path) as stream:
            text = stream.read()
        local_dir = path.rpartition("/")[0] if Uri.parse(source).is_local else None
        manifest = parse_manifest(text, source, local_dir)
        data_fs, _ = filesystem(manifest.data_files[0], props) if manifest.data_files else (fs, "")

        def data_path(location: str) -> str:
            return filesystem(location, props)[1]

        return InventoryListing(
            source, manifest.created, lambda r: _s3_under(object_batches(manifest, data_fs, data_path), r)
        )
    if not path.endswith((".parquet", ".csv", ".csv.gz")):
        raise InvalidInputError(
            f"listing {where}: expected an S3 Inventory manifest.json, a .parquet file, or a .csv (.csv.gz) file"
        )
    return InventoryListing(source, _modified(fs, path, where), lambda r: _under(_plain_batches(fs, path, where), r))


def open_listing(source: str, root: str, props: Mapping[str, str], cutoff: datetime) -> InventoryListing:
    """The listing source of a scan of ``root``; refuses a cutoff later than the inventory's time.

    A table on local disk is always listed: matching there needs each file's identity on disk
    (S4), which an inventory does not give.
    """
    if Uri.parse(root).is_local:
        raise InvalidInputError(
            f"listing {source}: the scan location {root} is on local disk, which is listed directly "
            "(matching there needs each file's identity on disk, which an inventory does not give)"
        )
    listing = read_source(source, root, props)
    if cutoff > listing.listed_at:
        raise InvalidInputError(
            f"listing {source}: taken at {listing.listed_at.isoformat()}, before the cutoff {cutoff.isoformat()}: "
            "files written between the two cannot be in it. Give a cutoff no later than the inventory's time "
            "(--older-than / older_than), or a newer inventory; nothing was deleted"
        )
    log.info("listing from %s, taken at %s", source, listing.listed_at.isoformat())
    return listing


def listing_source(listing: str | None, storage: Any, root: str, props: Mapping[str, str], cutoff: datetime) -> Any:
    """Where a scan's listing comes from: the store itself, or the inventory ``listing`` names."""
    return storage if listing is None else open_listing(listing, root, props, cutoff)
