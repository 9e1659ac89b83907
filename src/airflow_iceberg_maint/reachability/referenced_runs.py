"""The referenced set past its share of the memory budget: hashed paths as sorted runs on local disk.

``ReferencedSet`` keeps every hashed path (``HASH_SCHEMA``) in memory until they pass its budget;
then they all go to ``SortedRuns`` (the index build's sorted runs: sorted by the exact hash,
spilled as Arrow IPC to a private directory under ``TMPDIR``, merged back in order), and so does
everything added afterwards. The spilled set answers three questions, each by one merged pass:

- how many distinct paths it holds (the report's ``referenced_files``);
- every exact hash it holds, in order (merged with the listed candidates': ``exact_match``);
- every row that could answer a question about some paths (their exact hashes, path keys and
  file identities), from which ``ReferencedSet.narrowed_for`` builds a small in-memory set that
  gives the same answers for those paths as the whole set would.

The same sorted runs by exact hash hold, on local storage, the listing's 128-bit hash and identity
of every listed file (``LISTED_SCHEMA``) and the referenced paths whose identity waits for them
(``DEFERRED_SCHEMA``); ``first_listed`` pairs the two by one merged pass (``ReferencedSet.resolve``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from airflow_iceberg_maint.reachability.path_hashes import HASH_SCHEMA
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

_DIR_PREFIX = "iceberg-orphan-refs-"
#: Referenced paths whose identity is DEFERRED: their 128-bit hash, and their number in the order added.
DEFERRED_SCHEMA = pa.schema([("exact", pa.int64()), ("check", pa.int64()), ("row", pa.int64())])


def _by_exact(entries: pa.Table) -> list[pa.Array]:
    return [entries["exact"]]


def hash_runs(budget_bytes: int, spill_dir: str | None, dir_prefix: str) -> SortedRuns:
    """Sorted runs of tables with an ``exact`` hash column, ordered by it, within ``budget_bytes``."""
    return SortedRuns(_by_exact, budget_bytes, spill_dir, dir_prefix=dir_prefix)


def by_exact(runs: SortedRuns) -> Iterator[tuple[pa.Table, np.ndarray]]:
    """The entries of ``runs`` in exact-hash order, as pieces with their exact hashes as a NumPy array."""
    for entries, keys in runs.sorted():
        yield entries, _numpy(keys[0])


def _numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)


def first_listed(deferred: SortedRuns, listed: SortedRuns) -> Iterator[tuple[np.ndarray, pa.Table]]:
    """For each piece of deferred paths (``DEFERRED_SCHEMA``), in hash order: the identities of those whose
    128-bit hash is that of the first listed file (``LISTED_SCHEMA``, in listing order) with their exact
    hash, and the rows of the others.

    One merged pass: the listed entries are read in hash order as far as the piece's last hash, and
    only those from that hash on are kept for the next piece. The first of equal listed hashes is
    the earliest listed (sorted runs keep input order on equal keys), as ``pc.index_in`` found it.
    """
    pieces = by_exact(listed)
    held = [np.empty(0, np.int64)] * 3  # exact, check, identity of the listed entries in hand
    exhausted = False
    for entries, exact in by_exact(deferred):
        if not len(exact):
            continue
        last = exact[-1]
        while not exhausted and (not len(held[0]) or held[0][-1] <= last):
            piece = next(pieces, None)
            if piece is None:
                exhausted = True
                break
            more, more_exact = piece
            added = (more_exact, _numpy(more["check"]), _numpy(more["identity"]))
            held = [np.concatenate([h, a]) for h, a in zip(held, added, strict=True)]
        found = np.zeros(len(exact), np.bool_)
        if len(held[0]):
            at = np.minimum(np.searchsorted(held[0], exact), len(held[0]) - 1)
            found = (held[0][at] == exact) & (held[1][at] == _numpy(entries["check"]))
            yield held[2][at[found]], entries.filter(pa.array(~found))
        else:
            yield held[2][:0], entries
        # Later pieces start at ``last`` or above: listed entries below it can match none of them.
        held = [h[int(np.searchsorted(held[0], last)) :] for h in held]


class SpilledReferences:
    """Hashed referenced paths in sorted runs by exact hash, within ``budget_bytes`` of memory."""

    def __init__(self, budget_bytes: int, spill_dir: str | None = None) -> None:
        self._runs = hash_runs(budget_bytes, spill_dir, _DIR_PREFIX)
        self.spilled_bytes = 0

    def add(self, batches: list[pa.RecordBatch]) -> None:
        table = pa.Table.from_batches(batches, schema=HASH_SCHEMA)
        self.spilled_bytes += table.nbytes
        self._runs.add(table)

    def close(self) -> None:
        self._runs.close()

    def _sorted(self) -> Iterator[tuple[pa.Table, np.ndarray]]:
        return by_exact(self._runs)

    def count(self) -> int:
        """Distinct exact hashes (as ``len`` of a set in memory)."""
        distinct, last = 0, None
        for _, exact in self._sorted():
            if len(exact):
                distinct += int(np.count_nonzero(exact[1:] != exact[:-1])) + int(last is None or exact[0] != last)
                last = exact[-1]
        return distinct

    def sorted_exact(self) -> Iterator[np.ndarray]:
        """Every exact hash held, in ascending order, as pieces (duplicates included)."""
        return (exact for _, exact in self._sorted())

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


_RESOLVED_PREFIX = "iceberg-orphan-resolved-"


def _by_identity(entries: pa.Table) -> list[pa.Array]:
    return [entries["identity"]]


class ResolvedIdentities:
    """The file identities ``ReferencedSet.resolve`` found for a spilled set's deferred paths, in sorted runs
    by identity within ``budget_bytes``: 8 bytes a referenced local path, too many to hold at 10^7."""

    def __init__(self, budget_bytes: int, spill_dir: str | None) -> None:
        self._runs = SortedRuns(_by_identity, budget_bytes, spill_dir, dir_prefix=_RESOLVED_PREFIX)

    def add(self, identities: np.ndarray) -> None:
        self._runs.add(pa.table({"identity": pa.array(identities, pa.int64())}))

    @property
    def spilled_bytes(self) -> int:
        """Bytes written to local disk so far."""
        return sum(run.stat().st_size for run in self._runs.runs)

    def close(self) -> None:
        self._runs.close()

    def matching(self, identities: pa.Array) -> pa.Array:
        """The identities held that are among ``identities`` (as often as held): one pass, each piece
        searched in one sorted copy of ``identities``."""
        wanted = np.unique(np.asarray(identities, np.int64))
        found: list[np.ndarray] = []
        for _, keys in self._runs.sorted():
            values = _numpy(keys[0])
            found.append(values[_member(values, wanted)])
        return pa.array(np.concatenate(found) if found else np.empty(0, np.int64))
