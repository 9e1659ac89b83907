"""What an orphan-removal run is asked to do (``OrphanOptions``), and the checks on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.deleting import DEFAULT_MAX_CONCURRENT_DELETES

if TYPE_CHECKING:  # a type only: the command line's parser reads this module's defaults without pyiceberg
    from airflow_iceberg_maint.orphans.other_tables import TablePaths

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
