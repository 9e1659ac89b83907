"""The chunked listing of a table location: candidates older than the cutoff, their hashes, and listed metadata."""

from __future__ import annotations

import gc
import logging
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, islice
from operator import attrgetter
from typing import Any

import pyarrow as pa
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.storage import FileInfo, KeepComponent
from airflow_iceberg_maint.orphans.listing.listed_rows import ListedRows
from airflow_iceberg_maint.progress import Phase
from airflow_iceberg_maint.reachability.other_tables import listed_metadata_files
from airflow_iceberg_maint.reachability.path_hashes import LISTED_SCHEMA, inode_identities, int64_array, path_hashes128
from airflow_iceberg_maint.reachability.referenced_runs import hash_runs
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

log = logging.getLogger(__name__)
_DIR_PREFIX = "iceberg-orphan-listed-"

LIST_STEP = 10_000  # listed files hashed together, and a progress update


def partition_field_names(table: Table) -> list[str]:
    """Names of the fields of every partition spec: their ``field=value`` directories are listed."""
    return sorted({f.name for spec in table.metadata.partition_specs for f in spec.fields})


def hidden_filter(table: Table) -> KeepComponent:
    return keep_filter(partition_field_names(table))


def keep_filter(partition_fields: Sequence[str]) -> KeepComponent:
    """Skip names starting with ``_`` or ``.``, except ``field=value`` directories of the partition fields."""
    fields = frozenset(partition_fields)

    def keep(name: str) -> bool:
        if not name.startswith(("_", ".")):
            return True
        field_name, eq, _ = name.partition("=")
        return bool(eq) and field_name in fields

    return keep


#: The listed rows held in memory before they are spilled, when the caller gives no budget.
DEFAULT_ROWS_BUDGET = 256 * 2**20


@dataclass
class Listing:
    rows: ListedRows  # candidates: strictly older than the cutoff; a file with no modification time never is
    listed: int
    metadata_files: list[str]  # table metadata files in any ``metadata`` folder, whatever their age
    on_disk: SortedRuns  # 128-bit hash and identity of every listed local file (LISTED_SCHEMA), by hash

    def close(self) -> None:
        """Remove what the listing spilled to local disk, if anything."""
        self.rows.close()
        self.on_disk.close()

    @property
    def candidates(self) -> list[FileInfo]:
        """Every candidate as a listed file (read back from disk if spilled): for small listings and tests."""
        return self.rows.all()

    @property
    def candidate_hashes(self) -> array[int]:
        """``path_hash`` of each candidate, computed by the listing beside the reads."""
        return self.rows.hashes()


_PATH, _MTIME, _INODE = attrgetter("path"), attrgetter("mtime"), attrgetter("inode")


def _take_listed(chunk: list[FileInfo], cutoff: datetime, listing: Listing) -> None:
    """Add a chunk of listed files: each step runs over the whole chunk in C, not a file at a time in Python."""
    listing.listed += len(chunk)
    paths = list(map(_PATH, chunk))
    mtimes = list(map(_MTIME, chunk))
    # ``cutoff > m`` is ``m < cutoff``; a file with no modification time is never a candidate.
    old = list(map(cutoff.__gt__, mtimes)) if None not in mtimes else [m is not None and m < cutoff for m in mtimes]
    first, second = path_hashes128(paths)
    listing.rows.add(list(compress(chunk, old)), array("q", compress(first, old)))
    listing.metadata_files.extend(listed_metadata_files(paths))
    inodes = list(map(_INODE, chunk))
    if None in inodes:  # only files on local disks have one
        local = [i is not None for i in inodes]
        first, second = array("q", compress(first, local)), array("q", compress(second, local))
        inodes = list(compress(inodes, local))
    if inodes:
        columns = [int64_array(first), int64_array(second), inode_identities(inodes)]
        listing.on_disk.add(pa.Table.from_arrays(columns, schema=LISTED_SCHEMA))


def list_candidates(
    storage: Any,
    root: str,
    keep: KeepComponent,
    cutoff: datetime,
    after_chunk: Callable[[], None] = lambda: None,
    rows_budget: int = DEFAULT_ROWS_BUDGET,
    spill_dir: str | None = None,
) -> Listing:
    """List ``root``; ``after_chunk`` runs after each chunk of listed files is taken.

    The candidates' rows past ``rows_budget`` bytes go to ``spill_dir`` (``ListedRows``), and
    the local files' identities go to sorted runs there within half of it: the caller closes the
    ``Listing`` when done with them.
    """
    on_disk = hash_runs(rows_budget // 2, spill_dir, _DIR_PREFIX)
    result = Listing(ListedRows(rows_budget, spill_dir), 0, [], on_disk)
    try:
        files = storage.list_files(root, keep)
        with Phase("listing") as listing:
            for chunk in iter(lambda: list(islice(files, LIST_STEP)), []):
                _take_listed(chunk, cutoff, result)
                after_chunk()
                listing.advance(len(chunk))
                if result.listed % 100_000 < LIST_STEP:
                    log.info("listed %d files under %s", result.listed, root)
        result.rows.finish()
    except BaseException:
        result.close()
        raise
    return result


@contextmanager
def older_objects_frozen() -> Iterator[Callable[[], None]]:
    """Keep the objects that existed before the scan out of the garbage collector's full passes.

    A scan allocates an object or more a listed file, so full collections run again and again,
    and each one walks the whole heap (the table's metadata included): about 0.3 CPU seconds
    of 1.5 per 100,000 files, on the core the listing needs. ``gc.freeze`` exempts the older
    objects until ``gc.unfreeze``: any of them that become cyclic garbage meanwhile are
    collected after the scan instead of during it. It yields ``gc.freeze`` for the listing to
    call after each chunk, so the listed files it keeps are not walked again and again either
    (0.03 to 0.1 s per 100,000 files).
    """
    gc.freeze()
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()
