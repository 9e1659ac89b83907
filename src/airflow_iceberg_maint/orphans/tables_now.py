"""Other tables confirmed against what storage holds now, for the folders a delete touches (S8, S17).

The metadata-folder rule (``other_tables.listed_table_protections``) is first decided from the
listed rows: a view of storage as it was when it was listed, or, with ``listing=``, as an
inventory saw it. A table created later inside the scan location (registering files that are
already there in place, with ``add_files``) is in no such view, and its files would look like
orphans. So just before deleting, each folder ``D`` below the scan root that holds a file about
to be deleted is looked at again: one listing of ``D/metadata/`` (a page per 1,000 names), each
folder once. ``D/metadata/`` holding a ``*.metadata.json`` that is not this table's makes ``D``
another table's location, kept whole; a folder that cannot be looked at is kept whole too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from pyiceberg.io import FileIO

from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri
from airflow_iceberg_maint.fs.storage import SupportsPrefixListing
from airflow_iceberg_maint.reachability.other_tables import (
    ProtectedLocation,
    is_listed_metadata_file,
    listed_table_protections,
)

log = logging.getLogger(__name__)

LOOK_WORKERS = 8  # folders looked at concurrently on object stores


def folders_below(paths: Iterable[str], root: str) -> list[str]:
    """Every folder strictly below ``root`` that holds one of ``paths``, each once, outermost first.

    A path not spelled under the root is skipped here (listings spell every file under the root's
    spelling; the caller keeps any other).
    """
    base = root.rstrip("/") + "/"
    found: set[str] = set()
    for path in paths:
        if not path.startswith(base):
            continue
        folder = path.rpartition("/")[0]
        # Up to the root, stopping at a folder already found (its ancestors were found with it).
        while len(folder) >= len(base) and folder not in found:
            found.add(folder)
            folder = folder.rpartition("/")[0]
    return sorted(found, key=lambda f: (f.count("/"), f))


def _all(_: str) -> bool:
    return True


class TablesNow:
    """Looks at the metadata folders of the folders a delete touches, each once, as storage holds them now."""

    def __init__(
        self,
        storage: SupportsPrefixListing,
        io: FileIO,
        table_uuid: str,
        table_location: str,
        equivalence: PathEquivalence,
    ) -> None:
        self.storage = storage
        self.io = io
        self.table_uuid = table_uuid
        self.table_location = table_location
        self.equivalence = equivalence

    def _look(self, folder: str) -> list[ProtectedLocation]:
        try:
            files, _ = self.storage.list_level(f"{folder}/metadata", _all)
            metadata = [f.path for f in files if is_listed_metadata_file(f.path)]
            # None of them is referenced here: each folder's newest file is read, whoever's it is.
            return listed_table_protections(
                metadata, [False] * len(metadata), self.io, self.table_uuid, self.table_location, self.equivalence
            )
        except Exception as exc:  # unsure whether a table lives there: its files are kept
            log.warning("%s/metadata: cannot be listed (%s); the folder is kept whole", folder, exc)
            return [ProtectedLocation(folder, f"its metadata folder cannot be listed now ({type(exc).__name__})")]

    def protections(self, folders: Sequence[str]) -> list[ProtectedLocation]:
        """Other tables' locations among ``folders`` now, and the folders that cannot be looked at."""
        if not folders:
            return []
        # One at a time on a local disk: its listing counts its calls without a lock.
        workers = 1 if Uri.parse(folders[0]).is_local else LOOK_WORKERS
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return [p for found in pool.map(self._look, folders) for p in found]
