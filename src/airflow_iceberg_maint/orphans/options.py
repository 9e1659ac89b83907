"""What an orphan-removal run is asked to do (``OrphanOptions``), the checks on it, and what every scan
resolves from it before listing anything (``scan_setup``: S3, S7, S8, S12).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_iceberg_maint.errors import CatalogListingError, GcDisabledError, InvalidInputError
from airflow_iceberg_maint.fs.batches import DEFAULT_MAX_CONCURRENT_DELETES
from airflow_iceberg_maint.fs.locations import PathEquivalence, validate_location
from airflow_iceberg_maint.reachability.cutoff import resolve_cutoff

if TYPE_CHECKING:  # types only: the command line's parser reads this module's defaults without pyiceberg
    from pyiceberg.table import Table

    from airflow_iceberg_maint.reachability.other_tables import TablePaths

PREFIX_MISMATCH_MODES = ("error", "ignore", "delete")
#: The memory a scan holds its listed files and referenced set in, beyond the hashes (see docs/safety.md).
DEFAULT_MEMORY_BUDGET_MB = 512


@dataclass(frozen=True)
class OrphanOptions:
    """What to remove. ``older_than`` (absolute) wins over ``older_than_days``."""

    older_than: datetime | None = None
    older_than_days: float | None = None
    location: str | None = None
    dry_run: bool = False
    prefix_mismatch_mode: str = "error"
    equal_schemes: Mapping[str, str] | None = None
    equal_authorities: Mapping[str, str] | None = None
    max_concurrent_deletes: int = DEFAULT_MAX_CONCURRENT_DELETES
    reader_processes: int | None = None  # manifest-decoding workers; None: one a core for large local tables
    # Other tables of the catalog (one catalog pass, shared by the tables cleaned in one run);
    # None: this run lists the table's catalog itself.
    other_tables: Sequence[TablePaths] | None = None
    # The user's word that the location holds this table only: no catalog pass (the metadata
    # folders of other tables found in the listing are still kept whole).
    only_this_table: bool = False
    # An inventory to read the listing from instead of listing storage (``inventory``); None: list storage.
    listing: str | None = None
    # Listed files and referenced paths held in memory past this many MB go to local disk (``TMPDIR``).
    memory_budget_mb: int = DEFAULT_MEMORY_BUDGET_MB
    cache: str | None = None  # the digest cache's folder (S22); None: no cache


def check_options(options: OrphanOptions) -> None:
    if options.prefix_mismatch_mode not in PREFIX_MISMATCH_MODES:
        raise InvalidInputError(
            f"prefix_mismatch_mode {options.prefix_mismatch_mode!r}: expected one of {', '.join(PREFIX_MISMATCH_MODES)}"
        )
    if options.listing is not None and not options.listing.strip():
        raise InvalidInputError("listing: must not be empty (omit it to list storage)")
    if options.memory_budget_mb < 1:
        raise InvalidInputError(f"memory_budget_mb {options.memory_budget_mb}: expected at least 1")
    if options.max_concurrent_deletes < 1:
        raise InvalidInputError(f"max_concurrent_deletes {options.max_concurrent_deletes}: expected at least 1")


def rows_budget(options: OrphanOptions) -> int:
    """The share of the memory budget the listed rows may hold before they are spilled: a quarter
    (and the listed files' identities an eighth, in sorted runs)."""
    return options.memory_budget_mb * 2**20 // 4


def refs_budget(options: OrphanOptions) -> int:
    """The share the referenced set's hashed paths may hold before they go to sorted runs: a half (and its
    paths whose identity waits for the listing an eighth, in sorted runs)."""
    return options.memory_budget_mb * 2**20 // 2


def table_name(table: Table) -> str:
    return ".".join(table.name())


def refuse_gc_disabled(table: Table) -> None:
    if str(table.properties.get("gc.enabled", "true")).strip().lower() == "false":
        raise GcDisabledError(
            f"table {table_name(table)}: gc.enabled=false, so its files may be shared with other tables "
            "(for example branches in a Nessie catalog or a table registered twice); "
            "orphan removal would delete them and is refused"
        )


def other_tables(table: Table, options: OrphanOptions) -> Sequence[TablePaths]:
    if options.only_this_table:
        return ()
    if options.other_tables is not None:
        return options.other_tables
    # Imported here: the catalog pass needs pyiceberg, which the command line's parser must not load.
    from airflow_iceberg_maint.reachability.other_tables import catalog_table_paths

    try:
        return catalog_table_paths(table.catalog)
    except CatalogListingError as exc:
        raise CatalogListingError(
            f"table {table_name(table)}: {exc}; nothing was deleted. If the location holds this table only, "
            "say so with only_this_table (--only-this-table)"
        ) from exc


@dataclass(frozen=True)
class ScanSetup:
    """What every run checks and resolves before listing anything (S3, S7, S8, S12)."""

    cutoff: datetime
    equivalence: PathEquivalence
    root: str
    others: Sequence[TablePaths]


def scan_setup(table: Table, options: OrphanOptions, now: datetime) -> ScanSetup:
    check_options(options)
    cutoff = resolve_cutoff(options.older_than_days, options.older_than, now)
    refuse_gc_disabled(table)
    equivalence = PathEquivalence(options.equal_schemes or {}, options.equal_authorities or {})
    root = validate_location(options.location, table.metadata.location, equivalence)
    return ScanSetup(cutoff, equivalence, root, other_tables(table, options))
