"""Orphan-file removal and snapshot expiry for Python callers, with the command line's options and safe defaults.

Both are dry runs unless ``dry_run=False``. Both always keep every file of the table's indexes
(``INDEX_FILES``, S1), and expiry always keeps the snapshot of each index's newest extract
(``INDEX_SNAPSHOTS``, S13): what a caller passes in ``extra_sources`` and ``extra_pins`` is added to
them, never put in their place. The arguments are checked before the catalog is contacted (S7).
Neither function takes the table's lease nor records the run for ``due``: the command line and the
Airflow operators do both around them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum

from airflow_iceberg_maint.api.tables import (
    DEFAULT_CATALOG,
    CatalogLike,
    TableLike,
    check_cutoff,
    check_flag,
    check_protocol,
    check_whole,
    digest_folder,
    resolve_table,
)
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.expiry import run as expiry
from airflow_iceberg_maint.expiry.pins import SnapshotPin
from airflow_iceberg_maint.expiry.run import ExpiryReport
from airflow_iceberg_maint.expiry.settings import ExpireOptions, check_retain_last
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans import removal
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, OrphanOptions, check_options
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.reachability.digests import DEFAULT as DIGEST_CACHE
from airflow_iceberg_maint.reachability.sources import ReferenceSource


class PrefixMismatchMode(StrEnum):
    """What an orphan run does with a listed file that matches a referenced path but for its scheme or
    authority (bucket, account, name node), S4."""

    #: Delete nothing; raise ``PrefixMismatchError`` with the pairs (its ``report`` holds the run's report).
    ERROR = "error"
    #: Keep those files, delete the other orphans.
    IGNORE = "ignore"
    #: Delete those files too.
    DELETE = "delete"


def _mode(value: PrefixMismatchMode | str) -> PrefixMismatchMode:
    try:
        return PrefixMismatchMode(value)
    except ValueError:
        expected = ", ".join(f"PrefixMismatchMode.{m.name}" for m in PrefixMismatchMode)
        raise InvalidInputError(f"prefix_mismatch_mode {value!r}: expected one of {expected}") from None


def _mapping(value: Mapping[str, str] | None, what: str) -> Mapping[str, str] | None:
    if value is not None and not (
        isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    ):
        raise InvalidInputError(f"{what} {value!r}: expected a mapping of text to text, e.g. {{'s3a': 's3'}}")
    return value


def remove_orphan_files(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    older_than_days: float | None = None,
    older_than: datetime | None = None,
    location: str | None = None,
    dry_run: bool = True,
    prefix_mismatch_mode: PrefixMismatchMode = PrefixMismatchMode.ERROR,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    only_this_table: bool = False,
    listing: str | None = None,
    memory_budget_mb: int = DEFAULT_MEMORY_BUDGET_MB,
    extra_sources: Sequence[ReferenceSource] = (),
    cache: str | None = DIGEST_CACHE,
) -> OrphanReport:
    """Find the files under the table's location that nothing references and are older than the cutoff,
    and delete them when ``dry_run=False`` (``iceberg-maint orphans``, docs/cli.md).

    ``table``: a pyiceberg ``Table`` or ``"namespace.table"`` in ``catalog``. The cutoff is ``older_than``
    (a ``datetime``; UTC when it has no zone) or now minus ``older_than_days`` (default 3). ``extra_sources``
    keep more files (each a ``ReferenceSource``), beside the indexes' files, which are always kept.
    A dry run returns the same report a real run would, with nothing deleted.
    """
    now = datetime.now(UTC)
    check_cutoff(older_than, older_than_days, now)
    for flag, what in ((dry_run, "dry_run"), (only_this_table, "only_this_table")):
        check_flag(flag, what)
    check_whole(max_concurrent_deletes, "max_concurrent_deletes", 1)
    check_whole(memory_budget_mb, "memory_budget_mb", 1)
    check_protocol(extra_sources, "extra_sources", ("path_batches",))
    options = OrphanOptions(
        older_than=older_than,
        older_than_days=older_than_days,
        location=location,
        dry_run=dry_run,
        prefix_mismatch_mode=_mode(prefix_mismatch_mode).value,
        equal_schemes=_mapping(equal_schemes, "equal_schemes"),
        equal_authorities=_mapping(equal_authorities, "equal_authorities"),
        max_concurrent_deletes=max_concurrent_deletes,
        only_this_table=only_this_table,
        listing=listing,
        memory_budget_mb=memory_budget_mb,
        cache=digest_folder(cache),
    )
    check_options(options)
    loaded = resolve_table(table, catalog)
    return removal.remove_orphan_files(loaded, options, sources=[INDEX_FILES, *extra_sources], now=now)


def expire_snapshots(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    older_than_days: float | None = None,
    older_than: datetime | None = None,
    retain_last: int | None = None,
    dry_run: bool = True,
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES,
    extra_sources: Sequence[ReferenceSource] = (),
    extra_pins: Sequence[SnapshotPin] = (),
    cache: str | None = DIGEST_CACHE,
) -> ExpiryReport:
    """Expire the snapshots the Iceberg table spec's retention no longer needs, then delete the files only they
    reached, when ``dry_run=False`` (``iceberg-maint expire-snapshots``, docs/cli.md, docs/expiry.md).

    The cutoff is ``older_than`` or now minus ``older_than_days``; neither: the table's
    ``history.expire.max-snapshot-age-ms``, else 5 days. ``retain_last`` (default: the table's
    ``history.expire.min-snapshots-to-keep``, else 1): every branch keeps at least its N newest ancestors.
    ``extra_sources`` keep more files and ``extra_pins`` more snapshots (each a ``SnapshotPin``), beside the
    indexes' files and the snapshot of each index's newest extract, which are always kept.
    A dry run commits nothing, deletes nothing, and reports what a real run would.
    """
    now = datetime.now(UTC)
    check_cutoff(older_than, older_than_days, now)
    check_flag(dry_run, "dry_run")
    if retain_last is not None:
        check_whole(retain_last, "retain_last")  # its type; its bound is worded as the command line words it
        check_retain_last(retain_last)
    check_whole(max_concurrent_deletes, "max_concurrent_deletes", 1)
    check_protocol(extra_sources, "extra_sources", ("path_batches",))
    check_protocol(extra_pins, "extra_pins", ("snapshot_ids",))
    options = ExpireOptions(
        older_than=older_than,
        older_than_days=older_than_days,
        retain_last=retain_last,
        dry_run=dry_run,
        max_concurrent_deletes=max_concurrent_deletes,
        cache=digest_folder(cache),
    )
    loaded = resolve_table(table, catalog)
    return expiry.expire_snapshots(
        loaded, options, sources=[INDEX_FILES, *extra_sources], pins=[INDEX_SNAPSHOTS, *extra_pins], now=now
    )
