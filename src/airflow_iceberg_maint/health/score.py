"""The health score: 100 minus named deductions, each capped, each naming the job that removes its cause.

=====================  ===================================================  ====  ==================
cause                  points (rounded half up)                             cap   remedy
=====================  ===================================================  ====  ==================
small files            25 x compactable small files / data files            25    rewrite-data-files
deleted rows           50 x deleted rows / data rows                        25    rewrite-data-files
expirable bytes        40 x expirable bytes / (live bytes + expirable)      20    expire-snapshots
surplus manifests      1 per 10 manifests beyond the target size's need     15    rewrite-manifests
orphan bytes           30 x orphan bytes / (live bytes + orphan bytes)      15    orphans
=====================  ===================================================  ====  ==================

"Compactable" small files share their partition with another small file (a lone small file has
nothing to be merged with). Live bytes: data, delete and manifest bytes of the current snapshot.
Orphan bytes: what the last orphan run found and left (a dry run, or a run whose deletes failed),
from the state store; none recorded, none counted. The caps add up to 100. docs/health.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

REWRITE_DATA_FILES = "rewrite-data-files"
REWRITE_MANIFESTS = "rewrite-manifests"
EXPIRE_SNAPSHOTS = "expire-snapshots"
ORPHANS = "orphans"
REMEDIES = (REWRITE_DATA_FILES, REWRITE_MANIFESTS, EXPIRE_SNAPSHOTS, ORPHANS)

SMALL_FILES_CAP, SMALL_FILES_WEIGHT = 25, 25.0
DELETES_CAP, DELETES_WEIGHT = 25, 50.0
EXPIRABLE_CAP, EXPIRABLE_WEIGHT = 20, 40.0
MANIFESTS_CAP, MANIFESTS_PER_POINT = 15, 10
ORPHANS_CAP, ORPHANS_WEIGHT = 15, 30.0


@dataclass(frozen=True)
class Deduction:
    cause: str
    points: int
    remedy: str

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "points": self.points, "remedy": self.remedy}


@dataclass(frozen=True)
class ScoreInputs:
    data_files: int
    compactable_small_files: int
    data_rows: int
    deleted_rows: int
    live_bytes: int
    expirable_bytes: int
    expirable_snapshots: int
    surplus_manifests: int
    orphan_bytes: int


def _points(weight: float, share: float, cap: int) -> int:
    return min(cap, math.floor(weight * share + 0.5))


def _share(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def deductions(s: ScoreInputs) -> list[Deduction]:
    """The non-zero deductions, largest first (ties in the table's order)."""
    found = [
        Deduction(
            f"{s.compactable_small_files} of {s.data_files} data files are small and share a partition",
            _points(SMALL_FILES_WEIGHT, _share(s.compactable_small_files, s.data_files), SMALL_FILES_CAP),
            REWRITE_DATA_FILES,
        ),
        Deduction(
            f"delete files remove {s.deleted_rows} of {s.data_rows} rows",
            _points(DELETES_WEIGHT, min(1.0, _share(s.deleted_rows, s.data_rows)), DELETES_CAP),
            REWRITE_DATA_FILES,
        ),
        Deduction(
            f"{s.expirable_snapshots} expirable snapshots hold {s.expirable_bytes} bytes",
            _points(EXPIRABLE_WEIGHT, _share(s.expirable_bytes, s.live_bytes + s.expirable_bytes), EXPIRABLE_CAP),
            EXPIRE_SNAPSHOTS,
        ),
        Deduction(
            f"{s.surplus_manifests} manifests more than the target manifest size needs",
            min(MANIFESTS_CAP, max(0, s.surplus_manifests) // MANIFESTS_PER_POINT),
            REWRITE_MANIFESTS,
        ),
        Deduction(
            f"the last orphan run found {s.orphan_bytes} orphan bytes",
            _points(ORPHANS_WEIGHT, _share(s.orphan_bytes, s.live_bytes + s.orphan_bytes), ORPHANS_CAP),
            ORPHANS,
        ),
    ]
    return sorted((d for d in found if d.points > 0), key=lambda d: -d.points)


def score(found: list[Deduction]) -> int:
    return 100 - sum(d.points for d in found)
