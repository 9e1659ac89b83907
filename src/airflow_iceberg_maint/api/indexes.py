"""The index operations of ``iceberg-maint index`` for Python callers: create, list, refresh, lag, lookup,
expire extracts, and remove unreferenced index files (docs/cli.md, docs/index-format.md).

Each takes the table as a pyiceberg ``Table`` or a ``"namespace.table"`` name (with ``catalog``) and
returns a typed result. Like the orphan and expiry functions, none takes the table's lease: the
command line and the Airflow operators do. Removing unreferenced index files is a dry run unless
``dry_run=False``; expiring extracts has no dry run (it removes only what its arguments select, and
never the newest extract).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from airflow_iceberg_maint.api.tables import (
    DEFAULT_CATALOG,
    CatalogLike,
    TableLike,
    check_cutoff,
    check_flag,
    check_whole,
    resolve_table,
)
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.lifecycle import expire, lag, references
from airflow_iceberg_maint.index.lifecycle.lag import IndexLag
from airflow_iceberg_maint.index.lifecycle.references import UnreferencedReport
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.placement import use_index_location
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read import query
from airflow_iceberg_maint.index.read.lookup import LookupResult
from airflow_iceberg_maint.index.write import incremental
from airflow_iceberg_maint.index.write.refresh import RefreshResult
from airflow_iceberg_maint.reachability.cutoff import DEFAULT_OLDER_THAN_DAYS, cutoff_for_days


@dataclass(frozen=True)
class IndexInfo:
    """An index of a table: what ``create_index`` made, one entry of ``list_indexes``."""

    name: str
    metadata_location: str
    index_uuid: str
    #: The ordering expressions in the form ``create_index`` takes them (``"bucket(16, id)"``).
    ordering: list[str]
    #: The folder of the index's files.
    location: str
    extracts: int
    newest_extract_snapshot_id: int | None


@dataclass(frozen=True)
class ExtractExpiryReport:
    """What ``expire_index_extracts`` expired and deleted."""

    index: str
    expired_extract_ids: list[int] = field(default_factory=list)
    deleted_file_count: int = 0
    #: Deletes that failed, ``{"path", "error"}`` each: the files stay, a later run tries again.
    failed: list[dict[str, str]] = field(default_factory=list)


def _info(name: str, metadata: IndexMetadata, metadata_location: str) -> IndexInfo:
    schema = metadata.current_schema()
    newest = metadata.newest_extract()
    return IndexInfo(
        name=name,
        metadata_location=metadata_location,
        index_uuid=str(metadata.index_uuid),
        ordering=[o.expression.to_text(schema) for o in metadata.ordering_fields(schema)],
        location=metadata.location,
        extracts=len(metadata.extracts),
        newest_extract_snapshot_id=newest.source_table_snapshot_id if newest else None,
    )


def _texts(value: Sequence[str], what: str) -> list[str]:
    if isinstance(value, str | bytes) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{what} {value!r}: expected a list of column names")
    return list(value)


def create_index(
    table: TableLike,
    index: str,
    *,
    ordering: str | Sequence[str],
    identity: Sequence[str] = (),
    with_row_location: bool = False,
    properties: Mapping[str, str] | None = None,
    location: str | None = None,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> IndexInfo:
    """Define index ``index`` of the table (``iceberg-maint index create``); it has no extract until the first
    ``refresh_index``.

    ``ordering``: ``"bucket(16, id), id"`` or a list of such expressions; ``identity``: more columns to store;
    ``with_row_location``: store ``_file`` and ``_pos`` so that lookups fetch rows; ``location``: the folder of
    the table's indexes when the store refuses ``<table>/index/`` (kept as the property ``write.index.path``).
    """
    orderings = split_expression_list(ordering) if isinstance(ordering, str) else _texts(ordering, "ordering")
    columns = _texts(identity, "identity")
    check_flag(with_row_location, "with_row_location")
    wanted = dict(properties or {})
    loaded = resolve_table(table, catalog)

    def definition() -> IndexMetadata:
        return new_index_metadata(loaded, index, orderings, columns, with_row_location, wanted)

    metadata = definition()  # bad input is refused before the location is recorded
    if location is not None:
        loaded = use_index_location(loaded, location)
        metadata = definition()
    return _info(index, metadata, IndexStore(loaded).create(metadata, index))


def list_indexes(table: TableLike, *, catalog: CatalogLike = DEFAULT_CATALOG) -> list[IndexInfo]:
    """The indexes of the table, by name (``iceberg-maint index list``)."""
    store = IndexStore(resolve_table(table, catalog))
    found = []
    for name in store.names():
        metadata, metadata_location, _ = store.load(name)
        found.append(_info(name, metadata, metadata_location))
    return found


def refresh_index(
    table: TableLike,
    index: str,
    *,
    snapshot_id: int | None = None,
    full: bool = False,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> RefreshResult:
    """Build and commit an extract of the snapshot (default: current), incrementally from the nearest usable
    extract unless ``full`` (``iceberg-maint index refresh``)."""
    check_whole(snapshot_id, "snapshot_id")
    check_flag(full, "full")
    return incremental.refresh_index(resolve_table(table, catalog), index, snapshot_id, full=full)


def index_lag(table: TableLike, index: str, *, catalog: CatalogLike = DEFAULT_CATALOG) -> IndexLag:
    """How far the index lags its table: snapshots, seconds and files (``iceberg-maint index lag``)."""
    loaded = resolve_table(table, catalog)
    metadata, _, _ = IndexStore(loaded).load(index)
    return lag.index_lag(loaded, index, metadata)


def lookup_index(
    table: TableLike,
    index: str,
    keys: Sequence[Any] | pa.Array | pa.ChunkedArray | pa.Table,
    *,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> LookupResult:
    """The rows of the snapshot (default: current) whose key equals one of ``keys``, each once, in index order
    (``iceberg-maint index lookup --eq``, ``--is-null`` and ``--in-file``), exact for any snapshot (S5).

    ``keys``: values of the key's type (``[42, 7]``; ``None`` is the null key), a tuple per key for an index
    on several columns (``[(2026, "eu")]``), or Arrow: an array, or a table with a column per key column.
    ``columns``: the columns to return (default: all).
    """
    check_whole(snapshot_id, "snapshot_id")
    wanted = None if columns is None else _texts(columns, "columns")
    probes: Sequence[Any] | pa.Array | pa.ChunkedArray | pa.Table
    if isinstance(keys, pa.Array | pa.ChunkedArray | pa.Table):
        probes = keys
    elif isinstance(keys, Sequence) and not isinstance(keys, str | bytes):
        probes = [key if isinstance(key, tuple) else (key,) for key in keys]
    else:
        raise InvalidInputError(f"keys {keys!r}: expected a list of key values (a tuple each for several columns)")
    return query.query_keys(resolve_table(table, catalog), index, probes, snapshot_id, wanted)


def lookup_index_range(
    table: TableLike,
    index: str,
    *,
    low: Any = None,
    high: Any = None,
    snapshot_id: int | None = None,
    columns: Sequence[str] | None = None,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> LookupResult:
    """The rows whose first key column lies in ``[low, high]`` (inclusive; None: open), in index order
    (``iceberg-maint index lookup --from --to``)."""
    check_whole(snapshot_id, "snapshot_id")
    wanted = None if columns is None else _texts(columns, "columns")
    return query.query_range(resolve_table(table, catalog), index, low, high, snapshot_id, wanted)


def expire_index_extracts(
    table: TableLike,
    index: str,
    *,
    retain_last: int | None = None,
    older_than: datetime | None = None,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> ExtractExpiryReport:
    """Drop old extracts of the index, then delete the files no remaining extract lists
    (``iceberg-maint index expire``): with ``retain_last`` N all but the N newest, with ``older_than`` those
    created before it, with both those created before it beyond the N newest. The newest is never dropped."""
    if retain_last is None and older_than is None:
        raise InvalidInputError("expire_index_extracts: give retain_last, older_than, or both")
    check_whole(retain_last, "retain_last")
    if retain_last is not None and retain_last < 1:
        raise InvalidInputError(f"retain_last {retain_last}: must be at least 1 (the newest extract is never expired)")
    check_cutoff(older_than, None, datetime.now(UTC))
    result = expire.expire_extracts(resolve_table(table, catalog), index, retain_last, older_than)
    return ExtractExpiryReport(index, result["expired_extract_ids"], result["deleted_files"], result["failed"])


def remove_unreferenced_index_files(
    table: TableLike,
    index: str | None = None,
    *,
    older_than_days: float = DEFAULT_OLDER_THAN_DAYS,
    dry_run: bool = True,
    catalog: CatalogLike = DEFAULT_CATALOG,
) -> UnreferencedReport:
    """Delete index files older than the cutoff that no extract or metadata version references: files of
    failed builds, dropped metadata versions (``iceberg-maint index remove-unreferenced``). Every index of
    the table, or only ``index``."""
    now = datetime.now(UTC)
    check_cutoff(None, older_than_days, now)
    check_flag(dry_run, "dry_run")
    cutoff = cutoff_for_days(older_than_days, now)
    return references.remove_unreferenced_index_files(
        resolve_table(table, catalog), cutoff, name=index, dry_run=dry_run, now=now
    )
