"""Snapshot pins: how other parts of the project keep snapshots they need from expiry (S13).

The expiry engine owns this protocol; the index package implements it (the snapshot of each
index's newest extract). Like the orphan run's reference sources, the argument has no default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import MetadataReadError


class SnapshotPin(Protocol):
    #: Shown in errors and reports: which pin failed or kept a snapshot.
    name: str

    def snapshot_ids(self, table: Table) -> Mapping[int, str]:
        """Snapshots to keep, each with why (for the report); raise when they cannot all be read (S2)."""
        ...


def pinned_snapshots(table: Table, pins: Sequence[SnapshotPin]) -> dict[int, str]:
    """Every pinned snapshot; any failure aborts the run before anything is committed (S2)."""
    pinned: dict[int, str] = {}
    for pin in pins:
        try:
            pinned.update(pin.snapshot_ids(table))
        except MetadataReadError:
            raise
        except Exception as exc:
            raise MetadataReadError(f"snapshot pin {pin.name!r}: failed ({exc})") from exc
    return pinned
