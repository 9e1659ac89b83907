"""Per-file work on a few threads, results in item order (Parquet decoding runs outside the GIL)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def ordered_map(function: Callable[[_T], _R], items: Iterable[_T], workers: int) -> Iterator[_R]:
    """``function`` of each item on ``workers`` threads, results in item order, few held at once.

    Unlike ``ThreadPoolExecutor.map``, items are submitted only as results are taken, so a slow
    consumer does not let every result pile up in memory; and the next item is drawn only once a
    thread is free for it, so at most ``workers`` results are held at once. With one worker the
    items run on the caller's thread (no pool to start: a single-file lookup pays nothing).
    """
    if workers <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque[Future[_R]] = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
