"""The run's cutoff and retain-last: from the caller's options, else the table's ``history.expire.*`` properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.reachability.cutoff import EPOCH, resolve_cutoff

MAX_SNAPSHOT_AGE = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE = "history.expire.max-ref-age-ms"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's default: 5 days
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1


@dataclass(frozen=True)
class Approval:
    """What a reviewer approved of a dry run (S16): only these snapshots may expire, only these refs
    be removed and only these files be deleted, and each only if the fresh plan still says so."""

    snapshot_ids: frozenset[int]
    refs: frozenset[str]
    files: frozenset[str]
    table_uuid: str  # the reviewed table's: a table created again under its name is another table
    report: str = ""  # where the reviewed list came from, for errors


@dataclass(frozen=True)
class ExpireOptions:
    """What to expire. ``older_than`` (absolute) wins over ``older_than_days``; None means the table's default."""

    older_than: datetime | None = None
    older_than_days: float | None = None
    retain_last: int | None = None
    dry_run: bool = False
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES
    reader_processes: int | None = None  # manifest-decoding workers; None: one a core for large local tables
    approved: Approval | None = None  # a reviewed run: the fresh plan limited to what was approved
    cache: str | None = None  # the digest cache's folder (S22); None: no cache


@dataclass(frozen=True)
class Settings:
    """The resolved table-wide retention: refs may override parts of it (``retention``)."""

    cutoff: datetime  # snapshots strictly older may expire
    retain_last: int  # every branch keeps at least this many newest ancestors
    max_ref_age_ms: int | None  # refs (not main) older than this are removed; None: never


def _property(properties: Mapping[str, str], name: str, minimum: int) -> int | None:
    text = properties.get(name)
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InvalidInputError(f"table property {name}={text!r}: expected a whole number >= {minimum}")
    return value


def check_retain_last(value: int, what: str = "retain_last") -> int:
    if value < 1:
        raise InvalidInputError(f"{what} {value}: expected a whole number >= 1 (every branch keeps its head)")
    return value


def resolve_settings(properties: Mapping[str, str], options: ExpireOptions, now: datetime) -> Settings:
    """Refuses a future cutoff, a retain-last under 1 and malformed table properties, naming the input."""
    if options.older_than is not None or options.older_than_days is not None:
        cutoff = resolve_cutoff(options.older_than_days, options.older_than, now)
    else:
        age_ms = _property(properties, MAX_SNAPSHOT_AGE, 0)
        age_ms = DEFAULT_MAX_SNAPSHOT_AGE_MS if age_ms is None else age_ms
        try:
            cutoff = now - timedelta(milliseconds=age_ms)
        except OverflowError:
            cutoff = EPOCH  # any age reaching past 1970 expires by count only
        cutoff = max(cutoff, EPOCH)
    if options.retain_last is not None:
        retain_last = check_retain_last(options.retain_last)
    else:
        retain_last = _property(properties, MIN_SNAPSHOTS_TO_KEEP, 1) or DEFAULT_MIN_SNAPSHOTS_TO_KEEP
    return Settings(cutoff, retain_last, _property(properties, MAX_REF_AGE, 0))
