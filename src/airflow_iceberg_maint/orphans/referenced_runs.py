"""The referenced set past its share of the memory budget: hashed paths as sorted runs on local disk.

``ReferencedSet`` keeps every hashed path (``HASH_SCHEMA``) in memory until they pass its budget;
then they all go to ``SortedRuns`` (the index build's sorted runs: sorted by the exact hash,
spilled as Arrow IPC to a private directory under ``TMPDIR``, merged back in order), and so does
everything added afterwards. The spilled set answers three questions, each by one merged pass:

- how many distinct paths it holds (the report's ``referenced_files``);
- which of many exact hashes it holds (the listed candidates': one sorted copy of theirs in memory);
- every row that could answer a question about some paths (their exact hashes, path keys and
  file identities), from which ``ReferencedSet.narrowed_for`` builds a small in-memory set that
  gives the same answers for those paths as the whole set would.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_iceberg_maint.index.write.sorted_runs import SortedRuns
from airflow_iceberg_maint.orphans.path_hashes import HASH_SCHEMA

_DIR_PREFIX = "iceberg-orphan-refs-"


def _by_exact(entries: pa.Table) -> list[pa.Array]:
    return [entries["exact"]]


class SpilledReferences:
    """Hashed referenced paths in sorted runs by exact hash, within ``budget_bytes`` of memory."""

    def __init__(self, budget_bytes: int, spill_dir: str | None = None) -> None:
        self._runs = SortedRuns(_by_exact, budget_bytes, spill_dir, dir_prefix=_DIR_PREFIX)
        self.spilled_bytes = 0

    def add(self, batches: list[pa.RecordBatch]) -> None:
        table = pa.Table.from_batches(batches, schema=HASH_SCHEMA)
        self.spilled_bytes += table.nbytes
        self._runs.add(table)

    def close(self) -> None:
        self._runs.close()

    def _sorted(self) -> Iterator[tuple[pa.Table, np.ndarray]]:
        for entries, keys in self._runs.sorted():
            yield entries, np.asarray(keys[0].combine_chunks() if isinstance(keys[0], pa.ChunkedArray) else keys[0])

    def count(self) -> int:
        """Distinct exact hashes (as ``len`` of a set in memory)."""
        distinct, last = 0, None
        for _, exact in self._sorted():
            if len(exact):
                distinct += int(np.count_nonzero(exact[1:] != exact[:-1])) + int(last is None or exact[0] != last)
                last = exact[-1]
        return distinct

    def exact_mask(self, hashes: np.ndarray) -> pa.Array:
        """Whether each hash is held: the pieces, in hash order, searched in one sorted copy of ``hashes``."""
        ordered = np.sort(hashes)
        found: list[np.ndarray] = []
        for _, exact in self._sorted():
            if len(ordered) and len(exact):
                at = np.minimum(np.searchsorted(ordered, exact), len(ordered) - 1)
                found.append(exact[ordered[at] == exact])
        del ordered
        held = np.concatenate(found) if found else np.empty(0, np.int64)
        return pa.array(np.isin(hashes, held))

    def rows_for(self, exact: pa.Array, keys: pa.Array, identities: pa.Array) -> Iterator[pa.RecordBatch]:
        """Every row whose exact hash, path key or file identity is one of those given."""
        for entries, _ in self._sorted():
            wanted = pc.or_(
                pc.or_(pc.is_in(entries["exact"], value_set=exact), pc.is_in(entries["key"], value_set=keys)),
                pc.is_in(entries["identity"], value_set=identities),
            )
            yield from entries.filter(wanted).to_batches()
