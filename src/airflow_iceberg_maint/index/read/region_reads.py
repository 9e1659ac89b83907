"""Entries of region files: the row groups whose statistics admit the wanted keys, then filtered.

Region files never change, so their column layout and per-row-group statistics are cached per
process. Keys are either probes (equality, nulls equal nulls) or an inclusive range on one
column (nulls never match a range).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from threading import Lock
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools import LRUCache, cached
from cachetools.keys import hashkey
from pyiceberg.io import FileIO

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.format.extract_files import FIELD_ID
from airflow_iceberg_maint.index.read.key_scan import Probe, probe_mask, range_mask
from airflow_iceberg_maint.index.source.parquet_files import opened_parquet


@dataclass(frozen=True)
class _GroupStats:
    """Per row group statistics of one column, as arrays (null where a row group has none)."""

    low: pa.Array
    high: pa.Array
    nulls: pa.Array
    #: When the bounds ascend with the row groups, as they do for the ordering key's leading
    #: column, a value's row groups are one run, found by binary search: the number of leading
    #: row groups holding only nulls (nulls sort first), then the later groups' lower and upper
    #: bounds as Python lists. None otherwise (and for floats, whose order differs).
    ascending: tuple[int, list[Any], list[Any]] | None = None


#: Region files whose column layout and row-group statistics are kept per process.
_REGION_CACHE_SIZE = 1024


@cached(
    LRUCache(maxsize=_REGION_CACHE_SIZE),
    lock=Lock(),
    key=lambda parquet, path, column, arrow_field: hashkey(path, column),
)
def _column_group_stats(parquet: pq.ParquetFile, path: str, column: int, arrow_field: pa.Field) -> _GroupStats:
    """Min, max and null count of a column in each row group (cached: region files never change)."""
    lows, highs, nulls, only_nulls = [], [], [], []
    for g in range(parquet.metadata.num_row_groups):
        group = parquet.metadata.row_group(g)
        stats = group.column(column).statistics
        known = stats is not None and stats.has_min_max
        lows.append(stats.min if known else None)
        highs.append(stats.max if known else None)
        nulls.append(stats.null_count if stats is not None and stats.has_null_count else None)
        only_nulls.append(not known and nulls[-1] == group.num_rows)
    arrow_type = arrow_field.type
    value_type = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    try:
        low, high = pa.array(lows, type=value_type), pa.array(highs, type=value_type)
    except (pa.ArrowException, TypeError, ValueError):
        low = high = pa.nulls(len(lows), type=value_type)  # unusable statistics: no pruning
        return _GroupStats(low, high, pa.array(nulls, type=pa.int64()))
    ascending = None if pa.types.is_floating(value_type) else _ascending(lows, highs, only_nulls)
    return _GroupStats(low, high, pa.array(nulls, type=pa.int64()), ascending)


def _ascending(lows: list[Any], highs: list[Any], only_nulls: list[bool]) -> tuple[int, list[Any], list[Any]] | None:
    skip = next((i for i, empty in enumerate(only_nulls) if not empty), len(only_nulls))
    lows, highs = lows[skip:], highs[skip:]
    if None in lows or None in highs:
        return None  # a row group without bounds after the first values
    try:
        ordered = all(a <= b for a, b in pairwise(lows)) and all(a <= b for a, b in pairwise(highs))
        return (skip, lows, highs) if ordered and all(a <= b for a, b in zip(lows, highs, strict=True)) else None
    except TypeError:
        return None  # values Python cannot order


def _groups_admitting(stats: _GroupStats, value: Any) -> Iterable[int]:
    """The row groups that may hold the value (unknown statistics: yes)."""
    if value is not None and stats.ascending is not None:
        skip, lows, highs = stats.ascending
        try:
            first = bisect_left(highs, value)
            return range(skip + first, skip + max(first, bisect_right(lows, value)))
        except TypeError:
            pass  # a value of another kind than the statistics: compare in Arrow instead
    if value is None:
        admits = pc.fill_null(pc.greater(stats.nulls, 0), True)
    else:
        try:
            scalar = pa.scalar(value, type=stats.low.type)
        except (pa.ArrowException, TypeError, ValueError):
            return range(len(stats.low))
        admits = pc.fill_null(pc.and_(pc.less_equal(stats.low, scalar), pc.greater_equal(stats.high, scalar)), True)
    return cast("list[int]", pc.indices_nonzero(admits).to_pylist())


def _admitted_groups(key_stats: Sequence[_GroupStats], probes: Sequence[Probe], groups: int) -> list[int]:
    """The row groups whose statistics may hold one of the probes."""
    admitted: set[int] = set()
    for probe in probes:
        matches: set[int] | None = None
        for stats, value in zip(key_stats, probe, strict=True):
            admits = set(_groups_admitting(stats, value))
            matches = admits if matches is None else matches & admits
        if matches is None:
            return list(range(groups))  # a probe over no column matches everything
        admitted |= matches
    return sorted(admitted)


@cached(LRUCache(maxsize=_REGION_CACHE_SIZE), lock=Lock(), key=lambda parquet, path: hashkey(path))
def _columns_by_id(parquet: pq.ParquetFile, path: str) -> dict[int, tuple[int, pa.Field]]:
    """Field ID -> column index and Arrow field of a region file (cached: region files never change)."""
    return {
        int(f.metadata[FIELD_ID]): (i, f)
        for i, f in enumerate(parquet.schema_arrow)
        if f.metadata and FIELD_ID in f.metadata
    }


def read_region_matches(
    io: FileIO, path: str, key_ids: Sequence[int], output_ids: Sequence[int], probes: Sequence[Probe]
) -> pa.Table:
    """The ``output_ids`` columns of a region file's entries whose ``key_ids`` columns equal a probe."""
    return _read_region(
        io,
        path,
        key_ids,
        output_ids,
        lambda stats, groups: _admitted_groups(stats, probes, groups),
        lambda rows, names: _probe_rows(rows, names, probes),
    )


def read_region_range(io: FileIO, path: str, key_id: int, output_ids: Sequence[int], low: Any, high: Any) -> pa.Table:
    """The ``output_ids`` columns of a region file's entries whose ``key_id`` column lies in the
    inclusive range ``[low, high]`` (None: open)."""
    return _read_region(
        io,
        path,
        [key_id],
        output_ids,
        lambda stats, groups: _groups_in_range(stats[0], low, high),
        lambda rows, names: rows.filter(range_mask(rows, names[0], low, high)),
    )


def _read_region(
    io: FileIO,
    path: str,
    key_ids: Sequence[int],
    output_ids: Sequence[int],
    choose_groups: Callable[[list[_GroupStats], int], list[int]],
    select: Callable[[pa.Table, list[str]], pa.Table],
) -> pa.Table:
    """Read the row groups ``choose_groups`` admits from the key columns' statistics, keep the rows
    ``select`` keeps, and return their ``output_ids`` columns."""
    with opened_parquet(io, path) as handle:
        parquet = handle.file
        columns = _columns_by_id(parquet, path)
        missing = [i for i in (*key_ids, *output_ids) if i not in columns]
        if missing:
            raise InvalidInputError(f"region file {path}: no column with field ID(s) {missing}")
        key_stats = [_column_group_stats(parquet, path, *columns[k]) for k in key_ids]
        groups = choose_groups(key_stats, parquet.metadata.num_row_groups)
        names = [columns[i][1].name for i in (*key_ids, *output_ids)]
        if len(groups) > 1:
            # Many row groups (many keys, a wide range): their column chunks are fetched in a few
            # coalesced reads, not one read each (on S3, 700 GETs for 1,000 keys over 10^6
            # entries). Pre-buffering merges the chunks of adjacent row groups into one read, so
            # short gaps between wanted groups are read too (their rows are filtered out like
            # any other). The kept reader does not pre-buffer: it holds no bytes afterwards.
            groups = _gaps_filled(groups)
            parquet = pq.ParquetFile(handle.source, metadata=parquet.metadata, pre_buffer=True)
        rows = parquet.read_row_groups(groups, columns=list(dict.fromkeys(names)), use_threads=False)
    return select(rows, names[: len(key_ids)]).select(names[len(key_ids) :])


#: Unwanted row groups read between two wanted ones rather than starting another read.
_GAP_GROUPS = 2


def _gaps_filled(groups: list[int]) -> list[int]:
    """``groups`` (ascending) with the row groups of gaps of at most ``_GAP_GROUPS`` between them."""
    filled: list[int] = []
    for group in groups:
        if filled and group - filled[-1] - 1 <= _GAP_GROUPS:
            filled.extend(range(filled[-1] + 1, group))
        filled.append(group)
    return filled


def _probe_rows(rows: pa.Table, names: list[str], probes: Sequence[Probe]) -> pa.Table:
    """The rows equal to a probe: by binary search when the key column is sorted, else by a mask."""
    found = _sorted_matches(rows.column(names[0]), [p[0] for p in probes]) if len(names) == 1 else None
    return rows.filter(probe_mask(rows, names, probes)) if found is None else rows.take(found)


def _sorted_matches(column: pa.ChunkedArray, values: Sequence[Any]) -> pa.Array | None:
    """Ascending indices of the rows equal to one of ``values`` (a null matches nulls), found by
    binary search of each value; None when that does not apply.

    It applies to integer and temporal columns whose values ascend after their nulls, as a
    region's leading key column does (checked here, not assumed: one pass over the column). A
    membership test hashes every row of the region instead, which cost most of a query of
    thousands of keys. Floats are left to the mask (``-0.0`` equals ``0.0``; NaN).
    """
    kind = column.type
    if len(values) < 2 or not (pa.types.is_integer(kind) or pa.types.is_temporal(kind)):
        return None
    nulls = column.null_count
    if column.slice(0, nulls).null_count != nulls:
        return None  # nulls are not all first
    try:
        wanted = np.unique(pa.array([v for v in values if v is not None], type=kind).to_numpy(zero_copy_only=False))
        keys = column.slice(nulls).combine_chunks().to_numpy(zero_copy_only=False)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # a value of another type (the mask compares it as Arrow does), or no NumPy form
    if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        return None
    starts = np.searchsorted(keys, wanted, side="left")
    counts = np.searchsorted(keys, wanted, side="right") - starts
    # Each value's run of rows: its start repeated over the run, plus 0, 1, ... within the run.
    total = int(counts.sum())
    within = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    found = np.repeat(starts, counts).astype(np.int64) + within + nulls
    if None in values:
        found = np.concatenate([np.arange(nulls, dtype=np.int64), found])
    return pa.array(found, type=pa.int64())


def _groups_in_range(stats: _GroupStats, low: Any, high: Any) -> list[int]:
    """The row groups whose bounds may overlap ``[low, high]`` (unknown statistics: yes)."""
    admits = pa.array([True] * len(stats.low), type=pa.bool_())
    try:
        if low is not None:
            admits = pc.and_(admits, pc.fill_null(pc.greater_equal(stats.high, pa.scalar(low, stats.high.type)), True))
        if high is not None:
            admits = pc.and_(admits, pc.fill_null(pc.less_equal(stats.low, pa.scalar(high, stats.low.type)), True))
    except (pa.ArrowException, TypeError, ValueError):
        return list(range(len(stats.low)))  # bounds of another type: no pruning
    return cast("list[int]", pc.indices_nonzero(admits).to_pylist())
