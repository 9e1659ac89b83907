"""Step 4 of a sharded orphan scan (``scan.py``): gather the shards' unmatched files, then settle them.

The settling is the single-task run's own (``settling.py``): other tables' locations kept (S8),
the re-check against reloaded metadata, and the deletion.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.locations import Uri, local_path
from airflow_iceberg_maint.fs.storage import FileInfo
from airflow_iceberg_maint.orphans.listing.listed_rows import ROWS_SCHEMA, rows_of
from airflow_iceberg_maint.orphans.listing.spilled_batches import SpilledBatches
from airflow_iceberg_maint.orphans.matching import ORPHANS_PREFIX, protected_locations
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.report import OrphanReport, Phases, StageHook, report_undecodable
from airflow_iceberg_maint.orphans.settling import ScanRun, Unmatched, settle
from airflow_iceberg_maint.orphans.sharded.files import Scratch
from airflow_iceberg_maint.orphans.sharded.plan import (
    UNMATCHED_SCHEMA,
    file_infos,
    match_marker_name,
    plan_equivalence,
    plan_parts,
    read_markers,
    read_plan,
    shard_marker_name,
)
from airflow_iceberg_maint.reachability.other_tables import TablePaths
from airflow_iceberg_maint.reachability.path_hashes import EMPTY, HASH_SCHEMA, listed_identity
from airflow_iceberg_maint.reachability.reference_walk import ReferenceWalk, metadata_level_paths
from airflow_iceberg_maint.reachability.referenced import ReferencedSet
from airflow_iceberg_maint.reachability.sources import ReferenceSource


def _same_file_as_referenced(orphans: list[FileInfo], store: Scratch, refs_parts: list[str], plan_id: str) -> set[str]:
    """Local orphans that are a referenced file under a spelling of another bucket (S4: same device and inode)."""
    identities: dict[int, list[str]] = {}
    for info in orphans:
        if Uri.parse(info.path).is_local:
            identity = listed_identity(local_path(info.path))
            if identity != EMPTY:
                identities.setdefault(identity, []).append(info.path)
    if not identities:
        return set()
    wanted = pa.array(list(identities), pa.int64())
    found: set[str] = set()
    for name in refs_parts:
        referenced = store.read_table(name, HASH_SCHEMA, plan_id).column("identity")
        hits = wanted.filter(pc.is_in(wanted, value_set=referenced))
        for identity in hits.to_pylist():
            found.update(identities[identity])
    return found


def finish_sharded_scan(
    table: Table,
    scratch: str,
    io_properties: Mapping[str, str],
    *,
    sources: Sequence[ReferenceSource],
    on_stage: StageHook | None = None,
) -> OrphanReport:
    """Gather the shards' unmatched files, then re-check against reloaded metadata and delete, as a single run does."""
    store = Scratch(scratch, io_properties)
    plan = read_plan(store, str(table.metadata.table_uuid))
    shards = read_markers(store, plan, shard_marker_name)
    matches = read_markers(store, plan, match_marker_name)
    options = OrphanOptions(**plan["options"])
    equivalence, root = plan_equivalence(plan), plan["root"]
    report = OrphanReport(
        plan["table"], plan["table_uuid"], root, datetime.fromisoformat(plan["cutoff"]), options.dry_run
    )
    report.phase_seconds = {
        "plan": plan["seconds"],
        "shard_max": max(s["seconds"] for s in shards),
        "match_max": max(m["seconds"] for m in matches),
    }
    phases = Phases(report)
    report.files_listed = plan["files_listed"] + sum(s["files_listed"] for s in shards)
    report.list_calls = plan["list_calls"] + sum(s["list_calls"] for s in shards)
    report.referenced_files = sum(m["referenced_files"] for m in matches)
    report.kept_equivalent = sum(m["kept_equivalent"] for m in matches)
    report.snapshots = plan["snapshots"]
    report.manifests_read = sum(s["manifests_read"] for s in shards)
    report_undecodable(
        report,
        sorted(bytes.fromhex(h).decode("utf-8", "surrogateescape") for m in matches for h in m["kept_undecodable"]),
    )
    orphans: list[FileInfo] = []
    conflicts: list[FileInfo] = []
    for match in matches:
        rows = store.read_table(match["unmatched_part"], UNMATCHED_SCHEMA, plan["plan_id"])
        for info, conflict in zip(file_infos(rows), rows.column("conflict").to_pylist(), strict=True):
            (conflicts if conflict else orphans).append(info)
    orphans.sort(key=lambda i: i.path)
    conflicts.sort(key=lambda i: i.path)
    same = _same_file_as_referenced(orphans, store, plan_parts(plan, shards, "refs"), plan["plan_id"])
    if same:
        report.kept_equivalent += len(same)
        orphans = [o for o in orphans if o.path not in same]

    with ReferenceWalk(table, equivalence) as walk:
        walk.seen.update(m for chunk in plan["manifests"] for m in chunk)  # read by the shards
        listed_metadata = plan["metadata_files"] + [p for s in shards for p in s["metadata_files"]]
        # Which listed metadata files are this table's: its metadata log at plan time and now.
        own = ReferencedSet(equivalence)
        own.add(plan["metadata_paths"] + metadata_level_paths(table.metadata, table.metadata_location))
        others = [TablePaths.from_json(t) for t in plan["others"]]
        protected = protected_locations(table, root, listed_metadata, own, others, equivalence)
        run = ScanRun(
            report,
            options,
            storage_for(root, table.io.properties),
            walk,
            sources,
            phases,
            known=frozenset(plan["known_snapshots"]),
            on_stage=on_stage,
        )
        found = SpilledBatches(ROWS_SCHEMA, sys.maxsize, None, ORPHANS_PREFIX, "orphans")  # held as read
        found.add(rows_of(orphans))
        found.finish()
        settle(run, Unmatched(found, conflicts, protected))
    return report
