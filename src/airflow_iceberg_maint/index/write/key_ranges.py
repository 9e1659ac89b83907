"""Key ranges of a sharded build: N ranges of about equal size that follow the index order.

The ranges are cut by N-1 boundary keys ``B[0] < ... < B[N-2]`` (ordering-key tuples, compared
in the index order: nulls first, floats in the total order). Shard ``i`` takes the keys ``k`` with
``B[i-1] < k <= B[i]`` (the first shard has no lower end, the last no upper end), so every key,
a hot key equal to a boundary included, belongs to exactly one shard, like the incremental
refresh routes a key to the region whose ``group_max_value`` is the first one at or above it.

Boundaries are weighted quantiles of a sample: the entries of a few data files spread over the
key space (files ordered by the lower bound of the ordering key's first column), each entry
standing for ``record_count / sampled entries`` rows of its file. Data-file bounds also let a
shard skip the files that cannot hold its keys; a file whose bounds are missing or not
understood is read (it is then only filtered).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import PrimitiveType

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import METADATA_COLUMNS, Reference
from airflow_iceberg_maint.index.source.live_rows import plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.index.write.build import EntryLayout, entries_for_files, ordering_columns
from airflow_iceberg_maint.sorting.ordering import comparable, sort_indices, sortable

#: Data files whose entries form the sample, at least (more with more shards: ``4 * shards``).
MIN_SAMPLE_FILES = 16


@dataclass(frozen=True)
class KeyRanges:
    """The boundaries of N key ranges: one row per boundary key, one column per ordering-key field."""

    boundaries: pa.Table

    @property
    def count(self) -> int:
        return int(self.boundaries.num_rows) + 1

    def mask(self, shard: int, keys: Sequence[pa.Array | pa.ChunkedArray]) -> pa.Array:
        """True for the entries whose ordering key (one array per field) falls in range ``shard``."""
        if not 0 <= shard < self.count:
            raise InvalidInputError(f"shard {shard}: the build has shards 0 to {self.count - 1}")
        length = len(keys[0]) if keys else 0
        inside = pa.array([True] * length, type=pa.bool_())
        if shard > 0:
            inside = pc.and_(inside, _greater(keys, self._boundary(shard - 1)))
        if shard < self.count - 1:
            inside = pc.and_(inside, pc.invert(_greater(keys, self._boundary(shard))))
        return inside

    def _boundary(self, row: int) -> list[pa.Scalar]:
        return [sortable(column.slice(row, 1))[0] for column in self.boundaries.columns]

    def first_field_span(self, shard: int) -> tuple[Any, Any]:
        """The values of the first ordering field range ``shard`` can hold: inclusive (low, high), None for open."""
        first = self.boundaries.column(0).to_pylist()
        low = (first[shard - 1],) if shard > 0 else None
        high = (first[shard],) if shard < self.count - 1 else None
        return low, high

    def to_text(self) -> str:
        """A JSON-safe form (Arrow IPC, base64): exact for every type, ``-0.0`` and NaN included."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.boundaries.schema) as writer:
            writer.write_table(self.boundaries)
        return base64.b64encode(sink.getvalue().to_pybytes()).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> KeyRanges:
        try:
            with pa.ipc.open_stream(base64.b64decode(text.encode("ascii"), validate=True)) as reader:
                return cls(reader.read_all())
        except (ValueError, pa.ArrowInvalid) as exc:
            raise InvalidInputError(f"key ranges {text[:40]!r}...: cannot be decoded ({exc})") from exc


def _greater(keys: Sequence[pa.Array | pa.ChunkedArray], bound: Sequence[pa.Scalar]) -> pa.Array:
    """Whether each key tuple is greater than ``bound`` in the index order (null is the smallest value)."""
    greater: Any = pa.array([False] * len(keys[0]), type=pa.bool_())
    equal_so_far: Any = pa.array([True] * len(keys[0]), type=pa.bool_())
    for key, value in zip(keys, bound, strict=True):
        column = sortable(key)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if value.is_valid:
            above = pc.fill_null(pc.greater(column, value), False)
            same = pc.fill_null(pc.equal(column, value), False)
        else:
            above, same = pc.is_valid(column), pc.is_null(column)
        greater = pc.or_(greater, pc.and_(equal_so_far, above))
        equal_so_far = pc.and_(equal_so_far, same)
    return greater


def plan_key_ranges(table: Table, plan: SnapshotFiles, layout: EntryLayout, shards: int) -> tuple[KeyRanges, pa.Table]:
    """Up to ``shards`` ranges of about equal entry counts; also returns the sampled entries.

    Fewer ranges come out when the sample has fewer distinct keys than quantiles (a hot key
    holding several quantiles is one boundary), never an empty boundary list for a non-empty sample.
    """
    if shards < 1:
        raise InvalidInputError(f"shards: must be at least 1, got {shards}")
    sample_paths = _sample_files(table, plan, layout, max(MIN_SAMPLE_FILES, 4 * shards))
    parts, weights = [], []
    for path in sample_paths:
        entries = entries_for_files(table, plan, [path], layout)
        if entries.num_rows:
            parts.append(entries)
            record_count = plan.data_files[path].data_file.record_count
            weights.append(pa.array([record_count / entries.num_rows] * entries.num_rows, type=pa.float64()))
    sample = pa.concat_tables(parts).unify_dictionaries() if parts else layout.region_schema.empty_table()
    keys = ordering_columns(sample, layout)
    names = [f"k{i}" for i in range(len(keys))]
    if not parts or shards == 1:
        return KeyRanges(pa.table([k.slice(0, 0) for k in keys], names=names)), sample
    order = sort_indices(keys)
    keys = [k.take(order) for k in keys]
    cumulative = pc.cumulative_sum(pa.chunked_array(weights).take(order)).to_pylist()
    total = cumulative[-1]
    types = [k.type for k in keys]
    chosen: list[int] = []
    row = 0
    for quantile in range(1, shards):
        while cumulative[row] < total * quantile / shards:
            row += 1
        if row == len(cumulative) - 1:
            break  # the largest sampled key: the range above it would be known to be almost empty
        if not chosen or comparable(_key(keys, row), types) != comparable(_key(keys, chosen[-1]), types):
            chosen.append(row)
    indices = pa.array(chosen, type=pa.int64())
    return KeyRanges(pa.table([k.take(indices) for k in keys], names=names)), sample


def _key(keys: Sequence[pa.Array], row: int) -> list[Any]:
    return [k[row].as_py() for k in keys]


def _sample_files(table: Table, plan: SnapshotFiles, layout: EntryLayout, count: int) -> list[str]:
    """``count`` data files spread evenly over the files ordered by their first-key lower bound."""
    bounds = FirstKeyBounds(table, plan, layout)
    files = sorted(plan.data_files, key=lambda p: (bounds.lower_rank(p), p))
    if len(files) <= count:
        return sorted(files)
    step = len(files) / count
    return sorted({files[int(i * step)] for i in range(count)})


class FirstKeyBounds:
    """Data-file bounds of the ordering key's first field, where that field is a plain, non-float table column."""

    def __init__(self, table: Table, plan: SnapshotFiles, layout: EntryLayout) -> None:
        self.plan = plan
        self.source_id: int | None = None
        first = layout.ordering[0].expression if layout.ordering else None
        if isinstance(first, Reference):
            source_id = layout.source_ids.get(first.field_id)
            schema: Schema = plan_schema(table, plan)
            if source_id is not None and source_id not in METADATA_COLUMNS and source_id in schema.field_ids:
                field = schema.find_field(source_id)
                arrow_type = schema_to_pyarrow(field.field_type)
                # Float bounds leave out NaN and may not tell -0.0 from 0.0: never prune on them.
                if isinstance(field.field_type, PrimitiveType) and not pa.types.is_floating(arrow_type):
                    self.source_id, self.iceberg_type, self.arrow_type = source_id, field.field_type, arrow_type

    def _decoded(self, raw: bytes | None) -> tuple[bool, Any]:
        if raw is None or self.source_id is None:
            return False, None
        try:
            return True, pa.array([from_bytes(self.iceberg_type, raw)], type=self.arrow_type)[0].as_py()
        except (ValueError, TypeError, OverflowError, pa.ArrowException, UnicodeDecodeError):
            return False, None  # e.g. a bound written before a type promotion: not understood, not used

    def lower_rank(self, path: str) -> tuple[Any, ...]:
        """A sort key for sampling: files without a usable lower bound first."""
        lower_bounds = self.plan.data_files[path].data_file.lower_bounds or {}
        known, value = self._decoded(lower_bounds.get(self.source_id or -1))
        return (1, value) if known and value is not None else (0,)

    def may_hold(self, path: str, low: tuple[Any] | None, high: tuple[Any] | None) -> bool:
        """Whether the file may hold a first-field value in the inclusive span ``[low, high]`` (None: open)."""
        if self.source_id is None:
            return True
        data_file: DataFile = self.plan.data_files[path].data_file
        has_low, file_low = self._decoded((data_file.lower_bounds or {}).get(self.source_id))
        has_high, file_high = self._decoded((data_file.upper_bounds or {}).get(self.source_id))
        if not (has_low and has_high):
            return True
        nulls = (data_file.null_value_counts or {}).get(self.source_id)
        if nulls is None or nulls > 0:
            file_low = None  # the file holds nulls, the smallest keys
        types = [self.arrow_type]
        if high is not None and comparable([file_low], types) > comparable(list(high), types):
            return False
        return low is None or comparable([file_high], types) >= comparable(list(low), types)
