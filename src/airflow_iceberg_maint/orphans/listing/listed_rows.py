"""Listed candidates as columns: hashes in sorted runs, rows in Arrow, spilled to local disk past a share.

A listed file costs about a kilobyte as a Python object (its path, its time, its inode tuple),
so a scan of 10^8 files could not run on one worker. Here each chunk the listing takes becomes
one Arrow record batch (the path's exact bytes, size, modification time, device and inode),
held within ``budget_bytes`` and past it written to local disk (``SpilledBatches``); matching
reads back one batch at a time, keeping only the rows nothing references (the orphans,
conflicts, and equivalent spellings). The 64-bit exact hashes, all the exact match needs, go with their row numbers to
sorted runs by hash within half of ``budget_bytes`` (``hash_runs``), so nothing held grows
with the listing.

Names that are not UTF-8 (kept, never compared: S4) are rare: their row numbers are kept too.

The directory is removed when the scan ends (``close``), whether it succeeded or failed; one left
by a killed process is removed by the next scan that spills (``remove_abandoned``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.orphans.listing.spilled_batches import ClosedOnExit, SpilledBatches
from airflow_iceberg_maint.reachability.path_hashes import exact_bytes, int64_array
from airflow_iceberg_maint.reachability.referenced_runs import by_exact, hash_runs

ROWS_SCHEMA = pa.schema(
    [
        ("path", pa.binary()),  # the exact bytes: a local name need not be UTF-8
        ("size", pa.int64()),
        ("mtime", pa.timestamp("us", tz="UTC")),
        ("device", pa.uint64()),  # null off local disks
        ("inode", pa.uint64()),
    ]
)
_DIR_PREFIX = "iceberg-orphan-scan-"
_HASHES_PREFIX = "iceberg-orphan-hashes-"
_HASH_ROWS_SCHEMA = pa.schema([("exact", pa.int64()), ("row", pa.int64())])


def comparable(path: str) -> bool:
    """Whether a listed name can be compared exactly with metadata, which holds UTF-8 only."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a surrogate-escaped byte of a local name that is not UTF-8
        return False
    return True


def _path_column(paths: list[str]) -> pa.Array:
    if all(map(str.isascii, paths)):
        return pa.array(paths, pa.string()).view(pa.binary())  # the same bytes, converted in C
    return pa.array(list(map(exact_bytes, paths)), pa.binary())


def rows_of(files: Sequence[FileInfo]) -> pa.RecordBatch:
    """Listed files as one batch of ``ROWS_SCHEMA``."""
    inodes = [f.inode for f in files]
    columns = [
        _path_column([f.path for f in files]),
        pa.array([f.size for f in files], pa.int64()),
        pa.array([f.mtime for f in files], ROWS_SCHEMA.field("mtime").type),
        pa.array([i[0] if i else None for i in inodes], pa.uint64()),
        pa.array([i[1] if i else None for i in inodes], pa.uint64()),
    ]
    return pa.record_batch(columns, schema=ROWS_SCHEMA)


def paths_of(rows: pa.RecordBatch | pa.Table) -> list[str]:
    """The listed paths of some rows, as the listing gave them (a name that is not UTF-8 surrogate-escaped)."""
    return [p.decode("utf-8", "surrogateescape") for p in rows.column("path").to_pylist()]


def inodes_of(rows: pa.RecordBatch | pa.Table) -> list[tuple[int, int] | None]:
    """The (device, inode) of each row, None off local disks."""
    devices, inodes = rows.column("device").to_pylist(), rows.column("inode").to_pylist()
    return [None if d is None else (d, i) for d, i in zip(devices, inodes, strict=True)]


def file_infos_of(rows: pa.RecordBatch | pa.Table) -> list[FileInfo]:
    """The listed files a batch holds, as the listing gave them."""
    mtimes = list(map(_from_micros, rows.column("mtime").cast(pa.int64()).to_pylist()))
    columns = (paths_of(rows), rows.column("size").to_pylist(), mtimes, inodes_of(rows))
    return list(map(FileInfo, *columns))


def _from_micros(micros: int | None) -> datetime | None:
    # Through float seconds, in C: fromtimestamp rounds to the nearest microsecond, which is exact.
    return None if micros is None else datetime.fromtimestamp(micros / 1e6, UTC)


class ListedRows(ClosedOnExit):
    """The candidates of one listing, in listing order: hashes in sorted runs, rows in memory or on local disk.

    ``budget_bytes``: the rows held in memory before they are all written to disk (and half of
    it for the hashes' sorted runs). ``spill_dir``: where (default: the system temporary
    directory, ``TMPDIR``).
    """

    def __init__(self, budget_bytes: int, spill_dir: str | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.spill_dir = spill_dir
        self._hashes = hash_runs(max(budget_bytes // 2, 1), spill_dir, _HASHES_PREFIX)  # (path_hash, row)
        self._rows = SpilledBatches(ROWS_SCHEMA, budget_bytes, spill_dir, _DIR_PREFIX, "listed files")
        self.undecodable: list[int] = []  # row numbers of names that are not UTF-8

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def spilled(self) -> bool:
        return self._rows.spilled

    @property
    def spilled_bytes(self) -> int:
        return self._rows.spilled_bytes

    def add(self, files: Sequence[FileInfo], hashes: Sequence[int]) -> None:
        """Candidates next in listing order, with their ``path_hash``."""
        if not files:
            return
        start = len(self)
        numbers = pa.array(np.arange(start, start + len(files), dtype=np.int64))
        self._hashes.add(pa.Table.from_arrays([int64_array(hashes), numbers], schema=_HASH_ROWS_SCHEMA))
        paths = [f.path for f in files]
        if not all(map(str.isascii, paths)):
            self.undecodable.extend(start + i for i, p in enumerate(paths) if not comparable(p))
        self._rows.add(rows_of(files))

    def finish(self) -> None:
        """No more candidates: the file, if any, is closed for reading."""
        self._rows.finish()

    def close(self) -> None:
        self._hashes.close()
        self._rows.close()

    def sorted_hashes(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pieces of (``path_hash``, row number) of every candidate, in ascending hash order."""
        for entries, exact in by_exact(self._hashes):
            yield exact, np.asarray(entries["row"].combine_chunks())

    def hashes(self) -> array[int]:
        """``path_hash`` of each candidate, in listing order (for small listings and tests)."""
        pieces = list(self.sorted_hashes())
        if not pieces:
            return array("q")
        exact, rows = (np.concatenate(p) for p in zip(*pieces, strict=True))
        return array("q", exact[np.argsort(rows)].tobytes())

    def chunks(self) -> Iterator[tuple[int, int]]:
        """Each batch's number and first row number, in listing order."""
        return enumerate(self._rows.starts()) if len(self) else iter([])

    def batch_rows(self, number: int) -> int:
        ends = self._rows.ends
        return ends[number] - (ends[number - 1] if number else 0)

    def batch(self, number: int) -> pa.RecordBatch:
        """Batch ``number``, from memory or read back from disk."""
        return self._rows.batch(number)

    def rows(self, wanted: Sequence[int]) -> list[FileInfo]:
        """The candidates at the given row numbers (ascending), read back a batch at a time."""
        found: list[FileInfo] = []
        position = 0
        for number, start in self.chunks():
            mine = []
            while position < len(wanted) and wanted[position] < self._rows.ends[number]:
                mine.append(wanted[position] - start)
                position += 1
            if mine:
                found.extend(file_infos_of(self.batch(number).take(pa.array(mine, pa.int64()))))
        return found

    def all(self) -> list[FileInfo]:
        """Every candidate, as the listing gave them (for small listings and tests)."""
        return self.rows(range(len(self)))
