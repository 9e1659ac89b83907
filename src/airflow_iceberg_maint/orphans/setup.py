"""What every orphan scan checks and resolves before listing anything (S3, S7, S8, S12)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import CatalogListingError, GcDisabledError
from airflow_iceberg_maint.fs.locations import PathEquivalence, validate_location
from airflow_iceberg_maint.orphans.options import OrphanOptions, check_options
from airflow_iceberg_maint.reachability.cutoff import resolve_cutoff
from airflow_iceberg_maint.reachability.other_tables import TablePaths, catalog_table_paths


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
