"""The exact match's merged pass gives, for any cut of either stream into pieces, what a set would."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_iceberg_maint.orphans.exact_match import bits_at, referenced_bits

# A small hash space, so that equal hashes (within and across pieces, on both sides) are common.
_HASHES = st.lists(st.integers(-4, 12), max_size=40)
_CUTS = st.lists(st.integers(0, 40), max_size=6)


def _pieces(values: np.ndarray, cuts: list[int]) -> list[np.ndarray]:
    bounds = sorted({min(c, len(values)) for c in cuts} | {0, len(values)})
    return [values[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(candidates=_HASHES, referenced=_HASHES, candidate_cuts=_CUTS, referenced_cuts=_CUTS, start=st.integers(0, 9))
def test_bits_are_set_exactly_for_referenced_hashes(
    candidates: list[int], referenced: list[int], candidate_cuts: list[int], referenced_cuts: list[int], start: int
) -> None:
    hashes = np.array(candidates, np.int64)
    order = np.argsort(hashes, kind="stable")  # row numbers in hash order, as the sorted runs give them
    pieces = [
        (e, r)
        for e, r in zip(
            _pieces(hashes[order], candidate_cuts), _pieces(order.astype(np.int64), candidate_cuts), strict=True
        )
    ]
    refs = _pieces(np.sort(np.array(referenced, np.int64)), referenced_cuts)
    bits = referenced_bits(pieces, iter(refs), len(hashes))
    expected = [h in set(referenced) for h in candidates]
    assert bits_at(bits, 0, len(hashes)).tolist() == expected
    # Any window of rows, starting anywhere in a byte.
    first = min(start, len(hashes))
    assert bits_at(bits, first, len(hashes) - first).tolist() == expected[first:]


def test_no_candidates_or_no_references() -> None:
    assert bits_at(referenced_bits([], iter([np.array([1, 2], np.int64)]), 0), 0, 0).tolist() == []
    piece = (np.array([3, 5], np.int64), np.array([1, 0], np.int64))
    assert bits_at(referenced_bits([piece], iter([]), 2), 0, 2).tolist() == [False, False]
