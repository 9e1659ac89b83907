"""A file group's live rows, every delete applied, written into new files of the target size.

Rows are read with the index engine's readers (``index/source/live_rows``), which apply position
deletes, deletion vectors and equality deletes exactly, projected on the table's current schema.
Bin-pack streams: one input file's live rows are in memory at a time, handed to the sized writer, and a
file too large for half the memory budget is read in batches of rows that fit.
Sort and z-order need the group's rows together: a group whose rows exceed the memory budget
fails with a message saying so (it is left as it is; bin-pack, or a larger budget, rewrites it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from airflow_iceberg_maint.compaction.options import RewriteOptions, Strategy
from airflow_iceberg_maint.compaction.ordering import SortKey, sorted_rows, zorder_rows
from airflow_iceberg_maint.compaction.planning import FileGroupPlan
from airflow_iceberg_maint.compaction.writer import SizedWriter
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.index.source.live_rows import FILE_COLUMN, POS_COLUMN, live_row_batches, live_rows_of_file
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles

MB = 1024 * 1024
#: Arrow bytes a stored Parquet byte decodes to, at most in the common case (compression and encodings).
DECODED_PER_STORED_BYTE = 10
#: Input files read at the same time.
READERS = 4


class GroupTooLargeError(MaintenanceError):
    """A group to sort holds more rows than the memory budget."""


@dataclass(frozen=True)
class Layout:
    """The order of the rows written: none (bin-pack), sort keys, or z-order columns."""

    strategy: Strategy
    sort: tuple[SortKey, ...] = ()
    zorder: tuple[str, ...] = ()
    sort_order_id: int | None = None


@dataclass
class GroupOutput:
    group: FileGroupPlan
    files: list[DataFile]
    #: Every file written, committed or not.
    paths: list[str]

    @property
    def output_bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)


def delete_quietly(table: Table, paths: list[str]) -> None:
    """Remove files nothing references (a group that failed before its commit); a failure leaves an orphan."""
    for path in paths:
        try:
            table.io.delete(path)
        except Exception:  # the next orphan run removes it
            continue


def _live_rows(table: Table, plan: SnapshotFiles, path: str) -> pa.Table:
    return live_rows_of_file(table, plan, path, table.schema()).drop_columns([FILE_COLUMN, POS_COLUMN])


def _fits(plan: SnapshotFiles, path: str, share: int) -> bool:
    return plan.data_files[path].data_file.file_size_in_bytes * DECODED_PER_STORED_BYTE <= share


def _streamed(table: Table, plan: SnapshotFiles, path: str, budget: int) -> Iterator[pa.Table]:
    """A file too large for memory, in batches of rows that fit in half the budget."""
    data_file = plan.data_files[path].data_file
    per_row = data_file.file_size_in_bytes * DECODED_PER_STORED_BYTE / max(data_file.record_count, 1)
    batch_rows = max(1024, int(budget // 2 / per_row))
    for rows in live_row_batches(table, plan, path, table.schema(), batch_rows):
        yield rows.drop_columns([POS_COLUMN])


def _live_batches(table: Table, plan: SnapshotFiles, paths: tuple[str, ...], budget: int) -> Iterator[pa.Table]:
    """The live rows of ``paths`` in order. Files that surely fit in a share of half the budget are read
    ``READERS`` at a time (pyarrow decodes outside the GIL); a larger one is streamed on its own."""
    share = budget // 2 // READERS
    with ThreadPoolExecutor(READERS, thread_name_prefix="compaction-read") as pool:
        pending: deque[Future[pa.Table]] = deque()
        for path in paths:
            if _fits(plan, path, share):
                pending.append(pool.submit(_live_rows, table, plan, path))
                if len(pending) >= READERS:
                    yield pending.popleft().result()
                continue
            while pending:
                yield pending.popleft().result()
            yield from _streamed(table, plan, path, budget)
        while pending:
            yield pending.popleft().result()


def _ordered(rows: pa.Table, layout: Layout) -> pa.Table:
    if layout.strategy == Strategy.SORT:
        return sorted_rows(rows, layout.sort)
    return zorder_rows(rows, layout.zorder)


def rewrite_group(
    table: Table,
    plan: SnapshotFiles,
    group: FileGroupPlan,
    options: RewriteOptions,
    layout: Layout,
    on_file: Callable[[], None] = lambda: None,
) -> GroupOutput:
    """Write the group's live rows into new files (not committed); on failure the files written are removed."""
    bytes_per_row = group.input_bytes / max(group.input_records, 1)
    writer = SizedWriter(
        table,
        group.spec_id,
        group.partition_record,
        options.target_file_size_bytes,
        bytes_per_row,
        layout.sort_order_id,
    )
    try:
        if layout.strategy == Strategy.BINPACK:
            for rows in _live_batches(table, plan, group.input_files, options.memory_budget_mb * MB):
                writer.write(rows)
                on_file()
        else:
            budget = options.memory_budget_mb * MB
            pieces: list[pa.Table] = []
            held = 0
            for path in group.input_files:
                pieces.append(_live_rows(table, plan, path))
                held += pieces[-1].nbytes
                if held > budget:
                    raise GroupTooLargeError(
                        f"group {group.group_id}: its rows take more than --memory-budget-mb "
                        f"{options.memory_budget_mb} to {layout.strategy.value}; give a larger budget or use binpack"
                    )
                on_file()
            if pieces:
                writer.write(_ordered(pa.concat_tables(pieces), layout))
        return GroupOutput(group, writer.finish(), writer.paths)
    except BaseException:
        writer.abort()
        delete_quietly(table, writer.paths)
        raise
