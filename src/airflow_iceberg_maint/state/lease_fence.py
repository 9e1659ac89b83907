"""The fence of a held table lease: checked before every delete batch and every commit (S15).

``held`` keeps a taken lease for a run: it renews it every third of its ttl and makes it the
run's fence (``airflow_iceberg_maint.fencing``), which the delete path (``fs.batches``, before
each batch) and every commit (expiry, index versions) check through ``fencing.guard``. A check
is the store's one conditional renewal on table, owner and token (``LeaseStore.renew``): when
it finds the lease taken over or expired, the run stops with ``LeaseLostError``, and stays
stopped (a lost fence never passes again).

When the store cannot be reached, the lease is still surely ours while a third of its ttl is left
since the last renewal was sent (timed with this process's monotonic clock, so the wall clock does
not matter): the check passes with a warning. After that it may have expired: the run stops.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from airflow_iceberg_maint.errors import LeaseLostError
from airflow_iceberg_maint.fencing import fenced
from airflow_iceberg_maint.quiet_threads import quiet_thread, working
from airflow_iceberg_maint.state.leases import Lease, LeaseLog, LeaseStore, busy_with


class Fence:
    """A held lease, checked (and extended) by the store before each step that changes the table."""

    def __init__(self, store: LeaseStore, lease: Lease, ttl: timedelta, log: LeaseLog) -> None:
        self.lease, self._store, self._ttl, self._log = lease, store, ttl.total_seconds(), log
        self._lock = threading.Lock()
        self._lost: str | None = None  # why, once lost: every later check fails for that reason
        # Just taken (by a statement sent before now): held for ``ttl`` from about now.
        self._confirmed = time.monotonic()

    def check(self, before: str) -> None:
        """Pass if the lease is still ours (extending it), else raise ``LeaseLostError`` naming ``before``."""
        with self._lock:
            if self._lost is not None:
                raise self._stop(before, self._lost)
            sent = time.monotonic()
            try:
                renewed = self._store.renew(self.lease, timedelta(seconds=self._ttl))
            except Exception as exc:
                silent = time.monotonic() - self._confirmed  # the failed statement's own wait included
                if silent < self._ttl * 2 / 3:
                    self._log.warning("lease of %s not renewed (still held for now): %s", self.lease.table, exc)
                    return
                why = (
                    f"the state store has not answered for {silent:.0f} s (ttl {self._ttl:g} s), so it may have expired"
                )
                self._lost = f"{why} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                raise self._stop(before, self._lost) from exc
            if not renewed:
                self._lost = self._taken()
                raise self._stop(before, self._lost)
            self._confirmed = sent

    def renew(self) -> bool:
        """The renewal thread's check: a lost lease is logged (the work stops at its next check); False then."""
        try:
            self.check("renewing it")
        except LeaseLostError as exc:
            self._log.error("%s", exc)
            return False
        return True

    def _taken(self) -> str:
        try:
            holder = self._store.holder(self.lease.table)
        except Exception as exc:
            return f"it was taken over or expired (the holder cannot be read: {exc})"
        return "it expired (no run holds it now)" if holder is None else busy_with(holder)

    def _stop(self, before: str, why: str) -> LeaseLostError:
        return LeaseLostError(
            f"table {self.lease.table}: lease of {self.lease.owner} lost before {before}: {why}; the run stopped "
            "there, nothing more was deleted or committed"
        )


@contextmanager
def held(store: LeaseStore, lease: Lease, ttl: timedelta, log: LeaseLog) -> Iterator[Fence]:
    """Keep a taken lease for the body: its fence, renewed every third of ``ttl``; released after, failed or not."""
    fence = Fence(store, lease, ttl, log)
    stop = threading.Event()

    def renew() -> None:
        with quiet_thread():  # reader processes may fork while it waits (``quiet_threads``)
            while not stop.wait(ttl.total_seconds() / 3):
                with working():
                    if not fence.renew():
                        return

    renewer = threading.Thread(target=renew, name=f"lease {lease.table}", daemon=True)
    try:
        with fenced(fence):
            fence.check("starting")
            renewer.start()
            yield fence
    finally:
        stop.set()
        if renewer.is_alive():
            renewer.join()
        try:
            store.release(lease)
        except Exception as exc:  # it expires on its own
            log.warning("lease of %s not released (it expires within %g s): %s", lease.table, ttl.total_seconds(), exc)
