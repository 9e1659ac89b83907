"""The independent oracle of the reliability suite: what is live, read without the engine's code.

Table files come from pyiceberg's own ``inspect`` tables, the metadata log and the snapshots'
manifest lists (``tests.orphans.scenario.referenced_by_oracle``). Index files come from the
index directories read by hand: every numbered metadata file, the metadata log of the newest
one, and each extract's tracking file and the region files that tracking file lists (read with
plain pyarrow). Storage is listed with ``os.walk``. Local storage only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo
from pyiceberg.table import Table

from tests.orphans.scenario import referenced_by_oracle

_VERSION = re.compile(r"^\d{5,}\.metadata\.json$")


def fs_path(location: str) -> str:
    """The local path of a ``file:`` URI or a plain path."""
    if location.startswith("file://"):
        return location[len("file://") :]
    if location.startswith("file:"):
        return location[len("file:") :]
    return location


def listing(location: str, hidden: bool = False) -> set[str]:
    """Every file under ``location``, spelled with its prefix; names starting with ``_`` or ``.`` only if asked."""
    root = location.rstrip("/")
    base = fs_path(root)
    found: set[str] = set()
    for dirpath, dirnames, names in os.walk(base):
        rel = dirpath[len(base) :]
        if not hidden:
            dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
            names = [n for n in names if not n.startswith(("_", "."))]
        found.update(f"{root}{rel}/{n}" for n in names)
    return found


def _absolute(path: str, base: str) -> str:
    return path if "://" in path or path.startswith("/") else f"{base.rstrip('/')}/{path}"


def index_references(table_location: str) -> set[str]:
    """Every file the table's indexes keep alive: numbered metadata files, and live extracts' files."""
    root = f"{table_location.rstrip('/')}/index"
    refs: set[str] = set()
    if not os.path.isdir(fs_path(root)):
        return refs
    for name in sorted(os.listdir(fs_path(root))):
        meta_dir = f"{root}/{name}/metadata"
        versions = (
            sorted(n for n in os.listdir(fs_path(meta_dir)) if _VERSION.match(n))
            if os.path.isdir(fs_path(meta_dir))
            else []
        )
        if not versions:
            continue
        refs.update(f"{meta_dir}/{v}" for v in versions)
        with open(fs_path(f"{meta_dir}/{versions[-1]}"), "rb") as fh:
            current = json.load(fh)
        location = current["location"]
        refs.update(e["metadata-file"] for e in current.get("metadata-log", []))
        for extract in current.get("extracts", []):
            tracking = _absolute(extract["tracking-file"], location)
            refs.add(tracking)
            paths = pq.read_table(fs_path(tracking), columns=["file_path"]).column("file_path").to_pylist()
            refs.update(_absolute(p, location) for p in paths)
    return refs


def live_files(table: Table) -> set[str]:
    """Everything the table and its indexes reference (``version-hint.text`` only where the catalog writes one)."""
    refs = referenced_by_oracle(table) | index_references(table.metadata.location)
    hint = f"{table.metadata.location.rstrip('/')}/metadata/version-hint.text"
    return refs if os.path.exists(fs_path(hint)) else refs - {hint}


def missing(paths: Iterable[str]) -> list[str]:
    return sorted(p for p in paths if not os.path.exists(fs_path(p)))


def snapshot_rows(table: Table) -> dict[int, int]:
    """Row count of every snapshot, read through pyiceberg's scan (fails if a file is missing)."""
    return {s.snapshot_id: len(table.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in table.metadata.snapshots}


def scan_rows(table: Table, column: str, value: Any, snapshot_id: int | None = None) -> list[tuple[Any, ...]]:
    """Rows whose ``column`` equals ``value`` by a pyiceberg scan with a row filter: the lookup oracle."""
    rows = table.scan(row_filter=EqualTo(column, value), snapshot_id=snapshot_id).to_arrow().to_pylist()  # type: ignore[arg-type, call-arg]
    return sorted(tuple(r.values()) for r in rows)


def snapshot_ids(table: Table) -> dict[int, list[int]]:
    """The sorted ``id`` values every snapshot reads through pyiceberg's scan (fails if a file is missing)."""
    return {
        s.snapshot_id: sorted(
            table.scan(snapshot_id=s.snapshot_id, selected_fields=("id",)).to_arrow().column("id").to_pylist()
        )
        for s in table.metadata.snapshots
    }
