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

from airflow_iceberg_maint.orphans.path_hashes import HASH_SCHEMA
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

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
            found.append(exact[_member(exact, ordered)])
        del ordered
        held = np.concatenate(found) if found else np.empty(0, np.int64)
        return pa.array(np.isin(hashes, held))

    def rows_for(self, exact: pa.Array, keys: pa.Array, identities: pa.Array) -> Iterator[pa.RecordBatch]:
        """Every row whose exact hash, path key or file identity is one of those given."""
        wanted = [(name, np.unique(np.asarray(values, np.int64))) for name, values in _columns(exact, keys, identities)]
        for entries, _ in self._sorted():
            # Searched in sorted copies made once: ``pc.is_in`` would hash its value set again for every piece.
            mask = np.zeros(entries.num_rows, np.bool_)
            for name, values in wanted:
                mask |= _member(np.asarray(entries[name].combine_chunks()), values)
            yield from entries.filter(pa.array(mask)).to_batches()


def _columns(exact: pa.Array, keys: pa.Array, identities: pa.Array) -> list[tuple[str, pa.Array]]:
    return [("exact", exact), ("key", keys), ("identity", identities)]


def _member(values: np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """Whether each value is in ``ordered`` (sorted)."""
    if not len(ordered):
        return np.zeros(len(values), np.bool_)
    at = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return np.asarray(ordered[at] == values)
