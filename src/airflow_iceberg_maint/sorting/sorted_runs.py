"""Sorting entries beyond memory: sorted runs spilled to local disk, merged back in index order.

Entries arrive in input order (data files in path order, rows in file order) and are buffered
up to a share of the memory budget. A full buffer is sorted (stably) and written as one run, an
Arrow IPC file in a private temporary directory. The merge then reads each run a batch at a
time: every entry whose key is below the smallest last key of the batches in hand cannot be
preceded by an entry still on disk, so those entries of all runs are sorted together and handed
on. Equal keys keep input order (runs are in input order, each is sorted stably, and equal keys
are taken from earlier runs first), so the result equals one stable in-memory sort of every
entry. When everything fits in the budget nothing is written to disk.

The temporary directory is removed when the sort ends, whether it succeeded or failed; one left
by a killed process (its name holds the process ID) is removed by the next sort that finds it.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import tempfile
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import pyarrow as pa

from airflow_iceberg_maint.sorting.ordering import comparable, sort_indices

#: Entries per IPC batch of a run; the merge reads a run some batches at a time (see ``merge_bytes``).
RUN_BATCH_ROWS = 8_192
#: Entries the merge reads from a run at a time, at most (fewer when many runs share ``merge_bytes``).
MERGE_ROWS = 65_536
#: A run holds a third of the budget: sorting it needs the keys, 8-byte indices, and one column twice.
_RUN_SHARE = 3
#: Runs of one level merged into one run of the next once there are this many. A merge holds a
#: batch of each run at least, so without it the memory of the final merge would grow with the
#: number of runs (about 20 MB at 10^7 entries of 24 bytes in a 8 MB budget, 200 MB at 10^8);
#: with it at most FAN_IN - 1 runs a level are merged, each entry written once a level.
FAN_IN = 16
_DIR_PREFIX = "iceberg-index-build-"
_DIR_NAME = re.compile(r"(iceberg-[a-z-]+-)(\d+)-")  # this prefix or another user's (``private_directory``)

KeysOf = Callable[[pa.Table], list[pa.Array]]
Sorted = tuple[pa.Table, list[pa.Array]]


def sort_table(entries: pa.Table, keys_of: KeysOf) -> Sorted:
    """Entries in index order (stable), with their ordering-key columns in the same order."""
    return _ordered(entries, sort_indices(keys_of(entries)), keys_of)


def _ordered(entries: pa.Table, order: pa.Array, keys_of: KeysOf) -> Sorted:
    # Keys evaluated again on the sorted entries rather than taken: a key that is a column of the
    # entries (the usual case) is then that column, not a second copy of it.
    entries = entries.take(order)
    return entries, keys_of(entries)


class SortedRuns:
    """Entries added in input order, given back in index order within a memory budget.

    ``keys_of`` evaluates the ordering key of some entries; ``spill_dir`` is where runs are
    written (default: the system temporary directory, ``TMPDIR``). ``reserved_bytes`` of the
    budget are left to the consumer of the sorted entries (the regions being cut and written); a
    run holds a third of the rest, but never less than a sixth of the budget.
    """

    def __init__(
        self,
        keys_of: KeysOf,
        budget_bytes: int,
        spill_dir: str | None = None,
        reserved_bytes: int = 0,
        dir_prefix: str = _DIR_PREFIX,
    ) -> None:
        self.keys_of = keys_of
        self.dir_prefix = dir_prefix
        self.run_bytes = max(max(budget_bytes - reserved_bytes, budget_bytes // 2) // _RUN_SHARE, 1)
        # The merge holds the batches in hand and a sorted copy of them: together about a run,
        # however many runs there are (so 10^9 entries merge in the memory of 10^8).
        self.merge_bytes = max(self.run_bytes // 2, 1)
        self.spill_dir = spill_dir
        self.rows = 0
        self.runs: list[Path] = []  # in input order
        self._levels: list[int] = []  # of each run: how many merges made it (non-increasing along ``runs``)
        self._written = 0
        self._buffer: list[pa.Table] = []
        self._buffered_bytes = 0
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> SortedRuns:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Remove the runs written so far (and their directory)."""
        self._buffer = []
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    def add(self, entries: pa.Table) -> None:
        """Entries next in input order; a full buffer is sorted and spilled as a run."""
        if entries.num_rows == 0:
            return
        # A table larger than a run (a large data file, a large rewritten region) makes several runs.
        step = max(int(entries.num_rows * self.run_bytes / max(entries.nbytes, 1)), 1)
        for start in range(0, entries.num_rows, step):
            part = entries.slice(start, step)
            self._buffer.append(part)
            self._buffered_bytes += part.nbytes
            self.rows += part.num_rows
            if self._buffered_bytes >= self.run_bytes:
                self._spill()

    def _buffered(self) -> Sorted | None:
        if not self._buffer:
            return None
        entries = _combined(self._buffer)
        ordered = sort_table(entries, self.keys_of)
        del entries
        release_unused()  # the entries in input order
        # Held sorted in their place: ``sorted`` gives the same entries when called again.
        self._buffer, self._buffered_bytes = [ordered[0]], ordered[0].nbytes
        return ordered

    def _spill(self) -> None:
        if not self._buffer:
            return
        self._write_run()
        release_unused()

    def _write_run(self) -> None:
        entries = _combined(self._buffer)
        self._buffered_bytes = 0
        order = sort_indices(self.keys_of(entries))
        path = self._new_run()
        # Taken a batch at a time: the sorted run is never held whole next to the entries.
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, entries.schema) as writer:
            for start in range(0, len(order), RUN_BATCH_ROWS):
                writer.write_table(entries.take(order.slice(start, RUN_BATCH_ROWS)))
        self.runs.append(path)
        self._levels.append(0)
        if not any(pa.types.is_dictionary(field.type) for field in entries.schema):
            self._cascade(entries.schema)

    def _new_run(self) -> Path:
        self._written += 1
        return Path(self._run_directory()) / f"run-{self._written:05d}.arrow"

    def _cascade(self, schema: pa.Schema) -> None:
        """Merge the last FAN_IN runs into one while they are of one level.

        They are consecutive in input order and merged as the final merge would, so the order of
        every entry, equal keys included, is unchanged. Not for entries with a dictionary column:
        merged pieces carry several dictionaries, which one IPC file cannot hold.
        """
        while len(self._levels) >= FAN_IN and len(set(self._levels[-FAN_IN:])) == 1:
            group, level = self.runs[-FAN_IN:], self._levels[-1]
            path = self._new_run()
            cursors = [_Cursor(run, self.keys_of, self.merge_bytes // FAN_IN) for run in group]
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
                _write_in_batches(writer, (entries for entries, _ in _merge(cursors, self.keys_of)))
            for run in group:
                run.unlink()
            del self.runs[-FAN_IN:], self._levels[-FAN_IN:]
            self.runs.append(path)
            self._levels.append(level + 1)

    def _run_directory(self) -> str:
        if self._directory is None:
            self._directory = private_directory(self.spill_dir, self.dir_prefix)
        return self._directory.name

    def sorted(self) -> Iterator[Sorted]:
        """Every entry added, in index order, as pieces with their ordering-key columns (again at each call)."""
        if not self.runs:
            buffered = self._buffered()
            if buffered is not None:
                yield buffered
            return
        self._spill()
        share = self.merge_bytes // len(self.runs)
        yield from _merge([_Cursor(path, self.keys_of, share) for path in self.runs], self.keys_of)


def _combined(parts: list[pa.Table]) -> pa.Table:
    """The parts as one contiguous table (taking rows from it is fast), built a column at a time.

    Each column's chunks are released once it is copied, so at most one column is held twice.
    The dictionary column gets one dictionary, as the IPC file format requires.
    """
    pending = pa.concat_tables(parts).unify_dictionaries()
    parts.clear()
    names = pending.column_names
    columns = []
    for name in names:
        columns.append(pending.column(name).combine_chunks())
        pending = pending.drop_columns([name])
        release_unused()  # the column's chunks, before the next column is copied
    return pa.Table.from_arrays(columns, names=names)


def release_unused() -> None:
    """Give memory Arrow's allocator holds but no longer uses back to the system.

    The allocator keeps freed pages for reuse; after a run of hundreds of MB is sorted, or a
    region is written, they would count in the process's RSS long after the data is gone.
    """
    pa.default_memory_pool().release_unused()


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        return cast("Callable[[int], int]", ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_malloc_trim = _find_malloc_trim()


def trim_heap() -> None:
    """``release_unused``, and give the C heap's free pages back to the system too (glibc only).

    Python objects freed by the million (a listing's file entries, decoded manifest entries, in
    two threads) leave glibc's arenas holding free pages that count in the RSS until reused:
    about 35 MB after listing 10^6 files. Called between phases, never in a loop: it walks the heap.
    """
    release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


def private_directory(spill_dir: str | None, prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A new temporary directory for spilled files, named ``prefix`` (``iceberg-...-``) and this process's ID.

    ``spill_dir``: its parent (default: the system temporary directory, ``TMPDIR``). Directories
    of the same prefix left there by processes that no longer exist are removed first.
    """
    parent = spill_dir or tempfile.gettempdir()
    remove_abandoned(parent, prefix)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=parent)


def remove_abandoned(parent: str, prefix: str = _DIR_PREFIX) -> None:
    """Remove run directories of ``prefix`` under ``parent`` left by processes that no longer exist."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = _DIR_NAME.match(name)
        if match and match.group(1) == prefix and not _alive(int(match.group(2))):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


class _Cursor:
    """The next entries of one run, searchable by key: as many IPC batches in memory as fit in
    ``limit_bytes`` (at least one, at most ``MERGE_ROWS`` entries)."""

    def __init__(self, path: Path, keys_of: KeysOf, limit_bytes: int) -> None:
        self.file = pa.OSFile(str(path), "rb")
        self.reader = pa.ipc.open_file(self.file)
        self.keys_of = keys_of
        self.limit_bytes = limit_bytes
        self.next_batch = 0
        self.batch_rows = 0
        self.entries: pa.Table = self.reader.schema.empty_table()
        self.keys: list[pa.Array] = []
        self.refill()

    def refill(self) -> None:
        """Load the next batches once the current ones are used up."""
        while self.entries.num_rows == 0 and self.next_batch < self.reader.num_record_batches:
            batches: list[pa.RecordBatch] = []
            rows = size = 0
            while self.next_batch < self.reader.num_record_batches and (
                not batches or (size < self.limit_bytes and rows < MERGE_ROWS)
            ):
                batches.append(self.reader.get_batch(self.next_batch))
                self.next_batch += 1
                rows += batches[-1].num_rows
                size += batches[-1].nbytes
            self.entries = pa.Table.from_batches(batches).combine_chunks()
            self.batch_rows = self.entries.num_rows
            self.keys = self.keys_of(self.entries)

    @property
    def done(self) -> bool:
        return bool(self.entries.num_rows == 0)

    def key(self, index: int) -> tuple[tuple[Any, ...], ...]:
        return comparable([k[index].as_py() for k in self.keys], [k.type for k in self.keys])

    def bisect(self, bound: tuple[tuple[Any, ...], ...], right: bool) -> int:
        """Entries of the batch below ``bound`` (``right``: at or below it)."""
        return (bisect_right if right else bisect_left)(range(self.entries.num_rows), bound, key=self.key)

    def take(self, count: int) -> Sorted:
        """The first ``count`` entries of the batch, removed from it.

        A slice keeps its whole batch in memory while it lives, and the regions being cut hold
        many pieces: a small one (often the single last entry of a batch) is copied instead.
        """
        taken = self.entries.slice(0, count), [k.slice(0, count) for k in self.keys]
        if 2 * count < self.batch_rows:
            entries = taken[0].take(pa.array(range(count), pa.int64()))
            taken = entries, self.keys_of(entries)
        self.entries = self.entries.slice(count)
        self.keys = [k.slice(count) for k in self.keys]
        self.refill()
        return taken


def _write_in_batches(writer: pa.ipc.RecordBatchFileWriter, pieces: Iterator[pa.Table]) -> None:
    """Merged pieces (of any size) as batches of RUN_BATCH_ROWS entries: a run of many small batches
    would make its readers hold a footer entry a batch, and its cursors a batch of few entries."""
    pending: list[pa.Table] = []
    rows = 0
    for piece in pieces:
        pending.append(piece)
        rows += piece.num_rows
        if rows >= RUN_BATCH_ROWS:
            entries = pa.concat_tables(pending).combine_chunks()
            whole = rows - rows % RUN_BATCH_ROWS
            writer.write_table(entries.slice(0, whole), max_chunksize=RUN_BATCH_ROWS)
            pending, rows = [entries.slice(whole)], rows - whole
    if rows:
        writer.write_table(pa.concat_tables(pending))


def _merge(cursors: Sequence[_Cursor], keys_of: KeysOf) -> Iterator[Sorted]:
    try:
        while active := [c for c in cursors if not c.done]:
            frontier = min(c.key(c.entries.num_rows - 1) for c in active)
            pieces = [c.take(n) for c in active if (n := c.bisect(frontier, right=False))]
            if not pieces:
                # Every batch in hand starts at the frontier key: the earliest run's entries of it
                # come first, and no later run holds an entry below it.
                first = next(c for c in active if c.key(0) == frontier)
                pieces = [first.take(first.bisect(frontier, right=True))]
            yield _sorted_together(pieces, keys_of)
    finally:
        for cursor in cursors:
            cursor.file.close()


def _sorted_together(pieces: Sequence[Sorted], keys_of: KeysOf) -> Sorted:
    """Sorted pieces of consecutive runs as one sorted piece (stable: earlier runs first on equal keys)."""
    if len(pieces) == 1:
        return pieces[0]
    entries, keys = joined(pieces)
    return _ordered(entries, sort_indices(keys), keys_of)


def joined(pieces: Sequence[Sorted]) -> Sorted:
    """Pieces as one, in their order: the entries concatenated, each key column made of the pieces' chunks."""
    if len(pieces) == 1:
        return pieces[0]
    entries = pa.concat_tables([p[0] for p in pieces]).unify_dictionaries()
    return entries, [_chunks_of([p[1][i] for p in pieces]) for i in range(len(pieces[0][1]))]


def _chunks_of(columns: Sequence[pa.Array | pa.ChunkedArray]) -> pa.ChunkedArray:
    # pa.chunked_array would convert a ChunkedArray among its inputs value by value, in Python
    # (seconds for millions of strings): pass the chunks themselves, which copies nothing.
    chunks = [c for column in columns for c in (column.chunks if isinstance(column, pa.ChunkedArray) else [column])]
    return pa.chunked_array(chunks, type=columns[0].type)
