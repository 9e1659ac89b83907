"""A file group's live rows, read several input files at a time, handed on in the group's order.

Rows come from the index engine's readers (``index/source/live_rows``), which apply position
deletes, deletion vectors and equality deletes exactly, projected on the table's current schema.

Reading a small Parquet file costs about as much in Python (opening, projecting, applying
deletes) as in Arrow's decoder, and a thread holds the interpreter for the Python part; so
threads read a local table's files at about one core's pace whatever their number. A local table
is read by forked reader processes instead, a chunk of consecutive files each, while this process
writes; each chunk's rows come back as one Arrow table. Processes are forked only while every
other thread of this process is quiet (``quiet_threads``: a lease's renewal thread, waiting), else
the reads stay on threads. An object store's files are read by threads, which mostly wait on the
network. Either way a file too large for its share of the
memory budget is read in this process in batches of rows that fit.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import warnings
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.source.live_rows import FILE_COLUMN, POS_COLUMN, live_row_batches, live_rows_of_file
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles
from airflow_iceberg_maint.parent_watch import started_pool
from airflow_iceberg_maint.quiet_threads import forking

log = logging.getLogger(__name__)

#: Arrow bytes a stored Parquet byte decodes to, at most in the common case (compression and encodings).
DECODED_PER_STORED_BYTE = 10
#: Input files read at the same time from an object store (at least), where each read mostly waits on the network.
REMOTE_READERS = 4
#: At most this many readers: each read in flight may take an equal share of half the memory budget.
MAX_READERS = 8
#: Files of one chunk a reader process reads and returns at once: one file a task costs more in
#: hand-over than it saves (2,000 files of 30 KB: 3.1 s one a task, 2.0 s 20 a task, on 2 cores).
FILES_PER_CHUNK = 16
#: Chunks queued a reader process, so that none waits for this process to ask for the next.
CHUNKS_PER_PROCESS = 2
#: Below this many files a group is read by threads: forking costs more than it saves.
MIN_FILES_FOR_PROCESSES = 64


class ReaderProcessError(MaintenanceError):
    """A reader process ended without its rows (killed, or out of memory)."""

    retryable = True


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def readers(table: Table) -> int:
    """Input files (threads) or chunks (processes) read at the same time: one a usable core on local disk,
    at least ``REMOTE_READERS`` on an object store; never more than ``MAX_READERS``."""
    cores = usable_cores()
    wanted = max(2, cores) if Uri.parse(table.metadata.location).is_local else max(REMOTE_READERS, cores)
    return min(wanted, MAX_READERS)


def _worth_forking(table: Table, paths: tuple[str, ...]) -> bool:
    """A large local group, read from the main thread (a reader's end is tied to the thread that forked it)."""
    return (
        Uri.parse(table.metadata.location).is_local
        and usable_cores() > 1
        and len(paths) >= MIN_FILES_FOR_PROCESSES
        and threading.current_thread() is threading.main_thread()
        and "fork" in multiprocessing.get_all_start_methods()
    )


#: In a forked reader: the table and the snapshot's files of the group it reads (set by ``_start_reader``).
_READING: tuple[Table, SnapshotFiles] | None = None


def _start_reader(table: Table, plan: SnapshotFiles) -> None:
    """A reader's initializer; its arguments are inherited through the fork, not pickled."""
    global _READING
    _READING = (table, plan)


def _executor(table: Table, plan: SnapshotFiles, paths: tuple[str, ...], count: int) -> Executor | None:
    """Forked readers, all forked now (while quiet threads wait), or None where threads read."""
    if not _worth_forking(table, paths):
        return None
    with forking() as safe, warnings.catch_warnings():
        if not safe:
            others = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
            log.info("%d local files read by threads: other threads run (%s)", len(paths), ", ".join(others))
            return None
        # Python 3.12 warns of any fork with threads; the others are quiet, waiting on their events.
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        try:
            executor = started_pool(count, multiprocessing.get_context("fork"), _start_reader, (table, plan))
        except OSError as exc:
            log.info("%d local files read by threads: no reader process could fork (%s)", len(paths), exc)
            return None
    log.info("%d local files read by %d forked reader processes", len(paths), count)
    return executor


def live_rows(table: Table, plan: SnapshotFiles, path: str) -> pa.Table:
    return live_rows_of_file(table, plan, path, table.schema()).drop_columns([FILE_COLUMN, POS_COLUMN])


def _streamed(table: Table, plan: SnapshotFiles, path: str, budget: int) -> Iterator[pa.Table]:
    """A file too large for memory, in batches of rows that fit in half the budget."""
    data_file = plan.data_files[path].data_file
    per_row = data_file.file_size_in_bytes * DECODED_PER_STORED_BYTE / max(data_file.record_count, 1)
    batch_rows = max(1024, int(budget // 2 / per_row))
    for rows in live_row_batches(table, plan, path, table.schema(), batch_rows):
        yield rows.drop_columns([POS_COLUMN])


def _read_chunk(paths: tuple[str, ...]) -> pa.Table:
    """In a forked reader: the live rows of ``paths``, in order, as one table."""
    assert _READING is not None, "set by the reader's initializer"
    table, plan = _READING
    return pa.concat_tables([live_rows(table, plan, p) for p in paths])


@dataclass(frozen=True)
class _Shares:
    """Estimated decoded bytes: of a file read at once (larger: streamed here), and of the files of one chunk."""

    alone: int
    together: int
    files: int


def _shares(budget: int, count: int, forked: bool) -> _Shares:
    """Half the budget for what is in flight: a file a thread, or a chunk a queued task plus a copy of the
    rows each reader is handing over (pickled, then unpickled here)."""
    alone = budget // 2 // count
    if not forked:
        return _Shares(alone, alone, 1)
    return _Shares(alone, budget // 2 // (count * CHUNKS_PER_PROCESS + count), FILES_PER_CHUNK)


def _chunks(plan: SnapshotFiles, paths: tuple[str, ...], shares: _Shares) -> Iterator[tuple[str, ...] | str]:
    """Consecutive files that fit ``shares.together`` (at most ``shares.files`` of them; a file of up to
    ``shares.alone`` makes a chunk of its own), or one path alone that is larger than ``shares.alone``."""
    chunk: list[str] = []
    held = 0
    for path in paths:
        decoded = plan.data_files[path].data_file.file_size_in_bytes * DECODED_PER_STORED_BYTE
        if decoded > shares.alone:
            if chunk:
                yield tuple(chunk)
                chunk, held = [], 0
            yield path
            continue
        if chunk and (len(chunk) >= shares.files or held + decoded > shares.together):
            yield tuple(chunk)
            chunk, held = [], 0
        chunk.append(path)
        held += decoded
    if chunk:
        yield tuple(chunk)


def live_batches(
    table: Table, plan: SnapshotFiles, paths: tuple[str, ...], budget: int
) -> Generator[tuple[pa.Table, int], None, None]:
    """The live rows of ``paths`` in order (see the module's docstring), each batch with the number of files
    it begins (for progress); about half of ``budget`` at most is in flight."""
    count = readers(table)
    processes = _executor(table, plan, paths, count)
    forked = processes is not None
    executor = processes or ThreadPoolExecutor(count, thread_name_prefix="compaction-read")
    in_flight = count * CHUNKS_PER_PROCESS if forked else count
    try:
        yield from _in_order(executor, table, plan, paths, budget, _shares(budget, count, forked), in_flight, forked)
    except BrokenProcessPool as exc:
        raise ReaderProcessError(f"a reader process ended without its rows ({exc}); the group is left as is") from exc
    finally:
        # On a failure (or the consumer stopping) the reads not started are dropped, not waited for.
        executor.shutdown(wait=True, cancel_futures=True)


def _in_order(
    executor: Executor,
    table: Table,
    plan: SnapshotFiles,
    paths: tuple[str, ...],
    budget: int,
    shares: _Shares,
    in_flight: int,
    forked: bool,
) -> Generator[tuple[pa.Table, int], None, None]:
    pending: deque[tuple[Future[pa.Table], int]] = deque()
    for chunk in _chunks(plan, paths, shares):
        if isinstance(chunk, str):  # too large to read at once: streamed here, after what is in flight
            while pending:
                yield _result(pending.popleft())
            for i, rows in enumerate(_streamed(table, plan, chunk, budget)):
                yield rows, int(i == 0)
            continue
        read = executor.submit(_read_chunk, chunk) if forked else executor.submit(live_rows, table, plan, chunk[0])
        pending.append((read, len(chunk)))
        if len(pending) >= in_flight:
            yield _result(pending.popleft())
    while pending:
        yield _result(pending.popleft())


def _result(read: tuple[Future[pa.Table], int]) -> tuple[pa.Table, int]:
    return read[0].result(), read[1]
