"""Parquet files kept open per process, for point reads.

Data files, region files and tracking files are never changed once written, so a reader opened
once (footer parsed, remote object looked up) stays valid. A point lookup reads two files; opening
them cost about a fifth of its time on a local disk, and a metadata request each on S3.

A reader is used by one thread at a time (re-entrantly within it), and only with the file IO
properties it was opened with (a new set of credentials opens the file anew). A file deleted
while open stays readable through a local handle (its disk space is freed on eviction); the
cache is small. A forked child starts with an empty cache and a fresh lock: the parent's readers
are left alone there (their remote clients must not be used, nor closed, in the child).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from threading import Lock, RLock
from typing import Any

import pyarrow.parquet as pq
from cachetools import LRUCache
from pyiceberg.io import FileIO

#: Open readers kept per process (each holds a file handle).
OPEN_FILES = 32


@dataclass
class ParquetHandle:
    """An open Parquet file, the stream it reads, and the start row of each row group (plus the row
    count at the end)."""

    file: pq.ParquetFile
    source: Any  # a pyarrow random-access file, or a file object: both seek and read
    starts: list[int]
    lock: Any = field(default_factory=RLock)  # threading.RLock is a factory, not a type


_handles: LRUCache[tuple[str, frozenset[tuple[str, str]]], ParquetHandle] = LRUCache(maxsize=OPEN_FILES)
_handles_lock = Lock()
_inherited: list[Any] = []  # the parent's readers, kept referenced so that the child never closes them


def _start_empty_after_fork() -> None:
    global _handles, _handles_lock
    _inherited.append(_handles)
    _handles, _handles_lock = LRUCache(maxsize=OPEN_FILES), Lock()


os.register_at_fork(after_in_child=_start_empty_after_fork)


def _open(io: FileIO, path: str) -> ParquetHandle:
    # No pre-buffering: a kept reader would otherwise hold its last row group's bytes in memory.
    source = io.new_input(path).open()
    parquet = pq.ParquetFile(source, pre_buffer=False)
    groups = parquet.metadata
    starts = [0, *accumulate(groups.row_group(i).num_rows for i in range(groups.num_row_groups))]
    return ParquetHandle(parquet, source, starts)


@contextmanager
def opened_parquet(io: FileIO, path: str) -> Iterator[ParquetHandle]:
    """The file's reader, held for the caller's exclusive use until the block ends."""
    key = (path, frozenset((k, str(v)) for k, v in io.properties.items()))
    with _handles_lock:
        handle = _handles.get(key)
    if handle is None:
        handle = _open(io, path)
        with _handles_lock:
            handle = _handles.setdefault(key, handle)  # another thread may have opened it meanwhile
    with handle.lock:
        yield handle
