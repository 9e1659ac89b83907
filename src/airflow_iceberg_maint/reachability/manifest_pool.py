"""Worker processes that decode manifest lists and manifests beside the main interpreter.

Decoding Avro is CPU-bound Python, so one interpreter decodes on one core however many
threads it runs. Tables with many manifest lists and manifests are read by a few worker
processes instead. They are forked, or started from a ``forkserver`` when the caller runs
threads (see ``worker_start_method``), and they return manifest paths or hashed path batches:
never a partial result.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections import deque
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, as_completed
from functools import lru_cache
from typing import TypeVar

import pyarrow as pa
from pyiceberg.io import FileIO, load_file_io

from airflow_iceberg_maint.parent_watch import started_pool
from airflow_iceberg_maint.reachability.manifests import live_file_paths, unique_manifest_paths
from airflow_iceberg_maint.reachability.path_hashes import PathHasher

log = logging.getLogger(__name__)

MIN_FILES = 400  # below this many manifest lists and manifests, starting workers costs more than it saves
MAX_WORKERS = 8
CHUNKS_PER_WORKER = 4  # several chunks a worker, so a slow chunk does not hold the others up
HASHING_PER_WORKER = 2  # chunks of manifests a worker may be hashing, or have hashed and not handed on

IoSpec = tuple[tuple[tuple[str, str], ...], str]
T = TypeVar("T")


def worker_count(files: int, requested: int | None) -> int:
    """How many worker processes to use; 0 means read in this process."""
    if requested is not None:
        return requested if requested > 1 else 0
    cores = min(os.cpu_count() or 1, MAX_WORKERS)
    return cores if cores > 1 and files >= MIN_FILES else 0


@lru_cache(maxsize=8)
def _file_io(spec: IoSpec) -> FileIO:
    properties, location = spec
    return load_file_io(dict(properties), location)


def _read_lists(spec: IoSpec, manifest_lists: list[str]) -> list[str]:
    return unique_manifest_paths(_file_io(spec), manifest_lists)


def _hash_manifests(spec: IoSpec, manifests: list[str], hasher: PathHasher) -> pa.RecordBatch:
    io = _file_io(spec)
    return hasher.batch([p for m in manifests for p in live_file_paths(io, m)])


def _read_chunk(spec: IoSpec, read: Callable[[FileIO, list[str]], T], files: list[str]) -> T:
    return read(_file_io(spec), files)


def _chunks(items: list[str], parts: int) -> list[list[str]]:
    """Deal items round-robin: later manifest lists are longer, so slices would be unbalanced."""
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]


def worker_start_method() -> str:
    """``fork`` while this process runs one thread, else ``forkserver``.

    A forked child is ready at once, but it inherits every lock as it was at the fork: with one
    thread no lock can be held by a thread the child lacks, so that is safe. With other threads
    (an Airflow task may run some) workers come from the forkserver, clean but slower to start:
    each imports the caller's ``__main__`` again (CPython 3.11 never preloads it in the server).
    The pool forks all its workers before its own threads start (ProcessPoolExecutor does so
    for ``fork``).
    """
    return "fork" if threading.active_count() == 1 else "forkserver"


class ManifestPool:
    """A pool of decoding workers for one table's files."""

    def __init__(self, io: FileIO, location: str, workers: int) -> None:
        self.spec: IoSpec = (tuple(sorted((str(k), str(v)) for k, v in io.properties.items())), location)
        self.workers = workers
        self.start_method = worker_start_method()
        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":  # workers fork from a server that has already imported the readers
            context.set_forkserver_preload([__name__, "pyiceberg.io.pyarrow"])
        self._executor = started_pool(workers, context)
        # Start the workers now: their start-up then overlaps the listing instead of delaying the reads.
        for _ in range(workers):
            self._executor.submit(_file_io, self.spec)

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def read_chunks(self, read: Callable[[FileIO, list[str]], T], files: list[str]) -> list[Future[T]]:
        """Queue ``read(io, chunk)`` for chunks that hold each file once (``read``: a module-level function)."""
        parts = self.workers * CHUNKS_PER_WORKER
        return [self._executor.submit(_read_chunk, self.spec, read, chunk) for chunk in _chunks(files, parts)]

    def walk(
        self, manifest_lists: list[str], skip: Collection[str], hasher: PathHasher
    ) -> Iterator[tuple[list[str], pa.RecordBatch | None]]:
        """Manifests the lists name and the hashes of their live content files, in one pass.

        Yields ``(manifests, None)`` for manifests not in ``skip`` as the lists naming them are
        decoded, then ``(chunk, hashes)`` for each chunk of them. A manifest's read is queued as
        soon as one list names it, so the workers never wait for the slowest list; but only
        ``HASHING_PER_WORKER`` chunks a worker are submitted at a time: a finished chunk's hashes
        wait in this process until the caller takes them, and on a busy machine the workers
        would otherwise pile up the hashes of every manifest before the caller spills any.
        """
        parts = self.workers * CHUNKS_PER_WORKER
        lists = [self._executor.submit(_read_lists, self.spec, c) for c in _chunks(manifest_lists, parts)]
        found: set[str] = set()
        waiting: deque[list[str]] = deque()  # chunks not submitted yet
        hashing: deque[tuple[list[str], Future[pa.RecordBatch]]] = deque()

        def submit() -> None:
            while waiting and len(hashing) < self.workers * HASHING_PER_WORKER:
                chunk = waiting.popleft()
                hashing.append((chunk, self._executor.submit(_hash_manifests, self.spec, chunk, hasher)))

        for done in as_completed(lists):
            new = [m for m in done.result() if m not in skip and m not in found]
            if new:
                found.update(new)
                waiting.extend(_chunks(new, parts))
                submit()
                yield new, None
        while hashing:
            # Popped, not iterated: a future kept in the deque would keep its hashes in memory
            # after the caller has taken them (spilled them, once past the budget) until the walk ends.
            chunk, future = hashing.popleft()
            batch = future.result()
            del future
            submit()
            yield chunk, batch
