"""The cutoff rules (S7): files must be strictly older than an absolute time, never in the future nor before 1970."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime, timedelta

from airflow_iceberg_maint.errors import InvalidInputError

# The name the warning below has always been logged under (it warns about orphan removal's cutoff): log
# filters and the command line's output know it (tests/test_cli_progress.py), so it stays, not ``__name__``.
log = logging.getLogger("airflow_iceberg_maint.orphans.removal")

DEFAULT_OLDER_THAN_DAYS = 3.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def cutoff_for_days(days: float, now: datetime, what: str = "older_than_days") -> datetime:
    """``now`` minus ``days``; refuses what is not a finite number of days >= 0 reaching back to 1970 at most."""
    if not math.isfinite(days) or days < 0:
        raise InvalidInputError(f"{what} {days}: expected a finite number of days >= 0")
    try:
        cutoff = now - timedelta(days=days)
    except OverflowError:
        cutoff = datetime.min.replace(tzinfo=UTC)  # out of range either way: refused just below
    if cutoff < EPOCH:
        raise InvalidInputError(f"{what} {days:g}: expected at most {(now - EPOCH).days} days (back to 1970-01-01)")
    return cutoff


def resolve_cutoff(older_than_days: float | None, older_than: datetime | None, now: datetime) -> datetime:
    """The absolute cutoff: files must be strictly older. A future cutoff is refused."""
    if older_than is not None:
        cutoff = older_than if older_than.tzinfo else older_than.replace(tzinfo=UTC)
        if cutoff > now:
            raise InvalidInputError(f"older_than {cutoff.isoformat()}: is in the future (now is {now.isoformat()})")
        return cutoff.astimezone(UTC)
    days = DEFAULT_OLDER_THAN_DAYS if older_than_days is None else older_than_days
    cutoff = cutoff_for_days(days, now)
    if days == 0:
        log.warning("older_than_days is 0: every unreferenced file is eligible, including files of in-flight writes")
    return cutoff
