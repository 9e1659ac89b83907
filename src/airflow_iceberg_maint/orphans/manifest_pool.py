"""Worker processes that decode manifest lists and manifests beside the main interpreter.

Decoding Avro is CPU-bound Python, so one interpreter decodes on one core however many
threads it runs. Tables with many manifest lists and manifests are read by a few worker
processes instead. They start with ``forkserver``, so they come up clean even when the
caller runs threads (an Airflow task does), and they return manifest paths or hashed path
batches: never a partial result.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Collection, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from functools import lru_cache

import pyarrow as pa
from pyiceberg.io import FileIO, load_file_io

from airflow_iceberg_maint.orphans.manifests import live_file_paths, unique_manifest_paths
from airflow_iceberg_maint.orphans.path_hashes import PathHasher

log = logging.getLogger(__name__)

MIN_FILES = 400  # below this many manifest lists and manifests, starting workers costs more than it saves
MAX_WORKERS = 8
CHUNKS_PER_WORKER = 4  # several chunks a worker, so a slow chunk does not hold the others up

IoSpec = tuple[tuple[tuple[str, str], ...], str]


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


def _chunks(items: list[str], parts: int) -> list[list[str]]:
    """Deal items round-robin: later manifest lists are longer, so slices would be unbalanced."""
    parts = max(1, min(parts, len(items)))
    return [items[i::parts] for i in range(parts)]


class ManifestPool:
    """A pool of decoding workers for one table's files."""

    def __init__(self, io: FileIO, location: str, workers: int) -> None:
        self.spec: IoSpec = (tuple(sorted((str(k), str(v)) for k, v in io.properties.items())), location)
        self.workers = workers
        context = multiprocessing.get_context("forkserver")
        # Workers fork from a server that has already imported the readers.
        context.set_forkserver_preload([__name__, "pyiceberg.io.pyarrow"])
        self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=context)
        # Start the workers now: their start-up then overlaps the listing instead of delaying the reads.
        for _ in range(workers):
            self._executor.submit(_file_io, self.spec)

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def walk(
        self, manifest_lists: list[str], skip: Collection[str], hasher: PathHasher
    ) -> Iterator[tuple[list[str], pa.RecordBatch | None]]:
        """Manifests the lists name and the hashes of their live content files, in one pass.

        Yields ``(manifests, None)`` for manifests not in ``skip`` as the lists naming them are
        decoded, then ``(chunk, hashes)`` for each chunk of them. A manifest's read is queued as
        soon as one list names it, so the workers never wait for the slowest list.
        """
        parts = self.workers * CHUNKS_PER_WORKER
        lists = [self._executor.submit(_read_lists, self.spec, c) for c in _chunks(manifest_lists, parts)]
        found: set[str] = set()
        hashing: list[tuple[list[str], Future[pa.RecordBatch]]] = []
        for done in as_completed(lists):
            new = [m for m in done.result() if m not in skip and m not in found]
            if new:
                found.update(new)
                for chunk in _chunks(new, parts):
                    hashing.append((chunk, self._executor.submit(_hash_manifests, self.spec, chunk, hasher)))
                yield new, None
        for chunk, future in hashing:
            yield chunk, future.result()
