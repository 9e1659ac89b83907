"""Arrow record batches of one schema, in order: in memory within a budget, past it all in a file on local disk.

The listed candidates (``ListedRows``) and the orphans a scan finds are held this way, so that a
scan's memory does not grow with the table. While the batches fit in ``budget_bytes`` they stay
in memory; past it every batch is written to an Arrow IPC file in a private temporary directory
(``private_directory``), and each is read back by its number.

The directory is removed by ``close``, or with the object when it is collected (the orphans a
report lists live as long as the report); one left by a killed process is removed by the next
scan that spills under that prefix (``remove_abandoned``).
"""

from __future__ import annotations

import logging
import tempfile
import weakref
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Self

import pyarrow as pa

from airflow_iceberg_maint.sorting.sorted_runs import private_directory, release_unused

log = logging.getLogger(__name__)


class ClosedOnExit(ABC):
    """A ``with`` block over the object calls its ``close`` at the end."""

    @abstractmethod
    def close(self) -> None:
        """Free what the object holds on local disk and in memory."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SpilledBatches(ClosedOnExit):
    """Batches added in order; ``label`` names them in the log line that says how much was spilled."""

    def __init__(self, schema: pa.Schema, budget_bytes: int, spill_dir: str | None, prefix: str, label: str) -> None:
        self.schema = schema
        self.budget_bytes = budget_bytes
        self.spill_dir = spill_dir
        self.prefix, self.label = prefix, label
        self.spilled_bytes = 0
        self.ends: list[int] = []  # rows up to the end of each batch
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0
        self._directory: tempfile.TemporaryDirectory[str] | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._reader: pa.ipc.RecordBatchFileReader | None = None

    def __len__(self) -> int:
        """Rows, in every batch."""
        return self.ends[-1] if self.ends else 0

    @property
    def spilled(self) -> bool:
        return self._directory is not None

    def add(self, batch: pa.RecordBatch) -> None:
        """The next batch (an empty one too: batch numbers follow the caller's)."""
        self.ends.append(len(self) + batch.num_rows)
        if self._writer is not None:
            self._write(batch)
            return
        self._held.append(batch)
        self._held_bytes += batch.nbytes
        if self._held_bytes > self.budget_bytes:
            self._spill()

    def like(self) -> SpilledBatches:
        """An empty set of batches with the same schema, budget and place."""
        return SpilledBatches(self.schema, self.budget_bytes, self.spill_dir, self.prefix, self.label)

    def _spill(self) -> None:
        self._directory = private_directory(self.spill_dir, self.prefix)
        # Removed with this object if nobody closes it (a report's orphans), without the
        # warning of a temporary directory cleaned up implicitly.
        weakref.finalize(self, self._directory.cleanup)
        self._writer = pa.ipc.new_file(str(self._path()), self.schema)
        held, self._held, self._held_bytes = self._held, [], 0
        for batch in held:
            self._write(batch)
        del held
        release_unused()

    def _path(self) -> Path:
        assert self._directory is not None
        return Path(self._directory.name) / "batches.arrow"

    def _write(self, batch: pa.RecordBatch) -> None:
        assert self._writer is not None
        self._writer.write_batch(batch)
        self.spilled_bytes += batch.nbytes

    def finish(self) -> None:
        """No more batches: the file, if any, is closed for reading."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._reader = pa.ipc.open_file(str(self._path()))
            log.info("%s: spilled %d bytes to local disk (%d rows)", self.label, self.spilled_bytes, len(self))

    def close(self) -> None:
        self._held = []
        self._writer = self._reader = None
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    def batch(self, number: int) -> pa.RecordBatch:
        """Batch ``number``, from memory or read back from disk."""
        return self._held[number] if self._reader is None else self._reader.get_batch(number)

    def batches(self) -> Iterator[pa.RecordBatch]:
        return map(self.batch, range(len(self.ends)))

    def table(self) -> pa.Table:
        """Every row at once (for sets a caller holds whole anyway)."""
        return pa.Table.from_batches(self.batches(), schema=self.schema)

    def starts(self) -> list[int]:
        """The first row number of each batch."""
        return [0, *self.ends[:-1]]

    def rows(self, start: int, stop: int) -> pa.Table:
        """Rows ``start`` to ``stop``, reading only the batches that hold them."""
        stop = min(stop, len(self))
        first = bisect_right(self.ends, start)
        parts = []
        for number in range(first, bisect_right(self.ends, stop - 1) + 1 if stop > start else first):
            begin = self.ends[number - 1] if number else 0
            batch = self.batch(number)
            parts.append(batch.slice(max(start - begin, 0), stop - max(start, begin)))
        return pa.Table.from_batches(parts, schema=self.schema)
