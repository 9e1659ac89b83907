"""A file group's live rows, every delete applied, written into new files of the target size.

Rows are read by ``group_reads`` (every delete applied, on the table's current schema). Bin-pack
streams: the rows read are handed to the sized writer in order as they come, which encodes them on a
thread of its own; reading waits while a quarter of the memory budget waits for the writer.
Sort and z-order read the group twice. The first pass keeps only the key columns of its live rows
and orders them as one in-memory sort would (z-order's ranks are over the whole group's values), giving
each row its place. The second pass reads the rows again, each with its place, into ``SortedRuns``:
beyond the memory budget they spill as sorted runs to a private directory under ``TMPDIR`` (removed
at the end, also on failure) and are merged back in order into the sized writer. The result is the
rows of the one in-memory sort, in its order. Only a group whose key columns alone exceed the budget
fails, with a message saying so (it is left as it is).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from airflow_iceberg_maint.compaction.group_reads import live_batches
from airflow_iceberg_maint.compaction.options import RewriteOptions, Strategy
from airflow_iceberg_maint.compaction.ordering import SortKey, sort_order, zorder_order
from airflow_iceberg_maint.compaction.planning import FileGroupPlan
from airflow_iceberg_maint.compaction.writer import SizedWriter
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

MB = 1024 * 1024


#: The column giving each row its place in the group's order while it goes through the sorted runs.
PLACE_COLUMN = "_compaction_place"
SPILL_PREFIX = "iceberg-compaction-"


class GroupTooLargeError(MaintenanceError):
    """A group to sort holds more key values than the memory budget."""


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
    #: Sorted runs the group's rows spilled to local disk (0: sorted in memory, or bin-pack).
    spilled_runs: int = 0

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


def _key_columns(layout: Layout) -> list[str]:
    return [k.column for k in layout.sort] if layout.strategy == Strategy.SORT else list(layout.zorder)


def _places(
    table: Table, plan: SnapshotFiles, group: FileGroupPlan, layout: Layout, options: RewriteOptions
) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """Each live row's place (in read order) in the order one in-memory sort of the group gives.

    Only the key columns are kept: the rows themselves go through in batches."""
    budget = options.memory_budget_mb * MB
    columns = _key_columns(layout)
    parts: list[pa.Table] = []
    held = 0
    for rows, _ in live_batches(table, plan, group.input_files, budget):
        parts.append(rows.select(columns))
        held += parts[-1].nbytes + 16 * rows.num_rows  # the places and the order computed from the keys
        if held > budget:
            raise GroupTooLargeError(
                f"group {group.group_id}: its {layout.strategy.value} keys take more than --memory-budget-mb "
                f"{options.memory_budget_mb}; give a larger budget or use binpack"
            )
    if not parts:
        return np.empty(0, np.uint64)
    keys = pa.concat_tables(parts)
    order = sort_order(keys, layout.sort) if layout.strategy == Strategy.SORT else zorder_order(keys, columns)
    places = np.empty(keys.num_rows, np.uint64)
    places[order.to_numpy()] = np.arange(keys.num_rows, dtype=np.uint64)
    return places


def _write_ordered(
    table: Table,
    plan: SnapshotFiles,
    group: FileGroupPlan,
    options: RewriteOptions,
    layout: Layout,
    writer: SizedWriter,
    on_files: Callable[[int], None],
) -> int:
    """The group's live rows written in their order, through sorted runs; returns the runs spilled."""
    places = _places(table, plan, group, layout, options)
    budget = options.memory_budget_mb * MB
    with SortedRuns(
        lambda rows: [rows.column(PLACE_COLUMN)], budget, reserved_bytes=places.nbytes, dir_prefix=SPILL_PREFIX
    ) as runs:
        start = 0
        for rows, files in live_batches(table, plan, group.input_files, budget):
            runs.add(rows.append_column(PLACE_COLUMN, pa.array(places[start : start + rows.num_rows])))
            start += rows.num_rows
            on_files(files)
        if start != len(places):  # the files read back other rows: never write a mix of two reads
            raise MaintenanceError(f"group {group.group_id}: its files gave {len(places)} live rows, then {start}")
        del places
        for rows, _ in runs.sorted():
            writer.write(rows.drop_columns([PLACE_COLUMN]))
        return len(runs.runs)


def _write_behind(
    writer: SizedWriter,
    batches: Generator[tuple[pa.Table, int], None, None],
    held_bytes: int,
    on_files: Callable[[int], None],
) -> None:
    """``batches`` handed to ``writer`` in order on a thread of its own, so that files are read while a row
    group is encoded and compressed; reading waits when more than ``held_bytes`` of rows wait for the writer.
    On a failure (a read's or a write's) the writes not started are cancelled and the reads stopped."""
    with ThreadPoolExecutor(1, thread_name_prefix="compaction-write") as pool, closing(batches):
        waiting: deque[tuple[Future[None], int]] = deque()
        held = 0
        try:
            for rows, files in batches:
                waiting.append((pool.submit(writer.write, rows), rows.nbytes))
                held += rows.nbytes
                while waiting and (held > held_bytes or waiting[0][0].done()):
                    done, size = waiting.popleft()
                    done.result()
                    held -= size
                on_files(files)
            for done, _ in waiting:
                done.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def rewrite_group(
    table: Table,
    plan: SnapshotFiles,
    group: FileGroupPlan,
    options: RewriteOptions,
    layout: Layout,
    on_files: Callable[[int], None] = lambda files: None,
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
    spilled = 0
    try:
        if layout.strategy == Strategy.BINPACK:
            budget = options.memory_budget_mb * MB
            _write_behind(writer, live_batches(table, plan, group.input_files, budget), budget // 4, on_files)
        else:
            spilled = _write_ordered(table, plan, group, options, layout, writer, on_files)
        return GroupOutput(group, writer.finish(), writer.paths, spilled)
    except BaseException:
        writer.abort()
        delete_quietly(table, writer.paths)
        raise
