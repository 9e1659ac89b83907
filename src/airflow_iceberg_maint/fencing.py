"""The fence of the run in progress: checked before every delete batch and every commit (S15).

A run that holds its table's lease (``state.lease_fence.held``) sets its fence here, in a context
variable of the thread that runs the work; the delete path (``fs.batches``, before each batch) and
every commit (the expiry's, each index version) call ``guard``, which stops the run with
``LeaseLostError`` once the lease is lost. Outside a lease (library callers, tests) there is no
fence and ``guard`` does nothing. A module of its own so that storage code needs nothing of the lease.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Guard(Protocol):
    def check(self, before: str) -> None:
        """Pass while the run still holds its lease; else raise ``LeaseLostError`` naming ``before``."""
        ...


_CURRENT: ContextVar[Guard | None] = ContextVar("iceberg_maint_fence", default=None)


def current() -> Guard | None:
    """The current run's fence, if any: worker threads do not inherit it, so it is handed to them."""
    return _CURRENT.get()


def guard(before: str) -> None:
    """Check the current run's lease before ``before`` (a delete batch, a commit); nothing outside a lease."""
    fence = _CURRENT.get()
    if fence is not None:
        fence.check(before)


@contextmanager
def fenced(fence: Guard) -> Iterator[None]:
    """Make ``fence`` the current run's for the body, in this thread."""
    token = _CURRENT.set(fence)
    try:
        yield
    finally:
        _CURRENT.reset(token)
