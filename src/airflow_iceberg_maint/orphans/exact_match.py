"""Which listed candidates are referenced exactly: one merged pass over two streams sorted by hash.

The candidates' 64-bit exact hashes and row numbers come from their sorted runs
(``ListedRows.sorted_hashes``), the referenced hashes from the referenced set's
(``ReferencedSet.sorted_exact``: its sorted runs when spilled, one sorted copy when in memory).
Only pieces of each are in hand at a time, and the answer is one bit a candidate: matching
holds an eighth of a byte a listed file, whatever the sizes of the listing and the table.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

_ONE = np.uint8(1)


def referenced_bits(
    candidates: Iterable[tuple[np.ndarray, np.ndarray]], referenced: Iterator[np.ndarray], count: int
) -> np.ndarray:
    """A bit a candidate row (``count`` rows, least significant bit first), set when its hash is referenced.

    ``candidates``: pieces of (exact hashes, row numbers) in ascending hash order; ``referenced``:
    pieces of referenced exact hashes in ascending order (duplicates allowed, within and across
    pieces). The referenced hashes in hand are complete below their last one (an equal one may
    still come in the next piece), so the candidates below it are decided, and the rest wait for
    the next referenced piece; those below every candidate left are dropped first.
    """
    bits = np.zeros((count + 7) // 8, np.uint8)
    refs = np.empty(0, np.int64)
    more = True
    for exact, rows in candidates:
        while len(exact):
            # Without more referenced pieces, every candidate left is decided.
            decided = len(exact) if not more else int(np.searchsorted(exact, refs[-1])) if len(refs) else 0
            if not decided:
                refs = refs[int(np.searchsorted(refs, exact[0])) :]
                piece = next(referenced, None)
                if piece is None:
                    more = False
                else:
                    refs = np.concatenate([refs, piece])
                continue
            _mark(bits, exact[:decided], rows[:decided], refs)
            exact, rows = exact[decided:], rows[decided:]
    return bits


def _mark(bits: np.ndarray, exact: np.ndarray, rows: np.ndarray, refs: np.ndarray) -> None:
    if not len(refs):
        return
    at = np.minimum(np.searchsorted(refs, exact), len(refs) - 1)
    hit = rows[refs[at] == exact]
    np.bitwise_or.at(bits, hit >> 3, _ONE << (hit & 7).astype(np.uint8))


def bits_at(bits: np.ndarray, start: int, count: int) -> np.ndarray:
    """The flags of rows ``start`` to ``start + count`` of ``referenced_bits``, as booleans."""
    first = start >> 3
    flags = np.unpackbits(bits[first : (start + count + 7) >> 3], bitorder="little")
    offset = start - (first << 3)
    return flags[offset : offset + count].astype(np.bool_)
