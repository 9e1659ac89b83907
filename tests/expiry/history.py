"""A table history for expiry tests, and oracles that do not use the code under test.

- ``reachable``: what pyiceberg's ``inspect`` tables (full manifest decoding) and the metadata
  say the table references, metadata files aside (expiry never deletes those);
- ``snapshot_rows``: the live rows of every snapshot and ref head, read file by file with every
  delete applied (pyiceberg cannot scan equality deletes); a missing file fails it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.statistics import PartitionStatisticsFile, StatisticsFile
from pyiceberg.table.update import SetPartitionStatisticsUpdate

from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.source.live_rows import live_rows_of_file, plan_schema
from airflow_iceberg_maint.index.source.snapshot_files import plan_snapshot
from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes
from tests.orphans.scenario import SCHEMA, Files, referenced_by_oracle, rows


def after_clock_passes(timestamp_ms: int) -> None:
    """Wait until the clock is past ``timestamp_ms``, so the next snapshot is strictly newer."""
    while time.time() * 1000 <= timestamp_ms + 1:
        time.sleep(0.002)


def reachable(table: Table) -> set[str]:
    def is_metadata(path: str) -> bool:
        return path.endswith((".metadata.json", "version-hint.text"))

    return {p for p in referenced_by_oracle(table) if not is_metadata(p)}


def snapshot_rows(table: Table) -> dict[str, list[int]]:
    """Sorted ids of the live rows of every snapshot (``snapshot:ID``) and every ref (``ref:NAME``)."""

    def ids(snapshot_id: int) -> list[int]:
        snapshot = table.snapshot_by_id(snapshot_id)
        assert snapshot is not None
        plan = plan_snapshot(table, snapshot)
        schema = plan_schema(table, plan)
        parts = [live_rows_of_file(table, plan, path, schema) for path in sorted(plan.data_files)]
        return sorted(pa.concat_tables(parts)["id"].to_pylist()) if parts else []

    result = {f"snapshot:{s.snapshot_id}": ids(s.snapshot_id) for s in table.metadata.snapshots}
    result |= {f"ref:{name}": ids(ref.snapshot_id) for name, ref in table.metadata.refs.items()}
    return result


@dataclass
class History:
    table: Table
    ids: dict[str, int] = field(default_factory=dict)  # step name -> the snapshot it made
    stats: dict[str, str] = field(default_factory=dict)  # name -> statistics file path


def _step(history: History, name: str) -> None:
    snapshot = history.table.current_snapshot()
    assert snapshot is not None
    history.ids[name] = snapshot.snapshot_id
    after_clock_passes(snapshot.timestamp_ms)


def _statistics(history: History, name: str, snapshot_id: int, partition: bool = False) -> None:
    table = history.table
    path = f"{table.location()}/metadata/{name}-{snapshot_id}.{'parquet' if partition else 'puffin'}"
    Files(table).put(path, b"PFA1stats")
    if partition:
        update = SetPartitionStatisticsUpdate(  # type: ignore[call-arg]
            partition_statistics=PartitionStatisticsFile(  # type: ignore[call-arg]
                snapshot_id=snapshot_id, statistics_path=path, file_size_in_bytes=9
            )
        )
        table.catalog.commit_table(table, requirements=(), updates=(update,))
        table.refresh()
    else:
        set_statistics_file(table, snapshot_id, path)
    history.stats[name] = path


def set_statistics_file(table: Table, snapshot_id: int, path: str, size: int = 9) -> None:
    """Record ``path`` (``size`` bytes, written already) as the statistics file of ``snapshot_id``."""
    stats = StatisticsFile(  # type: ignore[call-arg]
        snapshot_id=snapshot_id,
        statistics_path=path,
        file_size_in_bytes=size,
        file_footer_size_in_bytes=4,
        blob_metadata=[],
    )
    with table.update_statistics() as update:
        update.set_statistics(stats)


def build_history(catalog: Catalog, name: str = "db.events") -> History:
    """Appends, an overwrite, a copy-on-write delete, position, equality and deletion-vector deletes,
    a tag, a branch with its own commits, and statistics files; every snapshot one a millisecond apart.

    Steps: a1 a2 (overwrite: ow_delete ow_append) cow pos eq dv [tag release] a3 [branch audit: b1] a4.
    """
    table = catalog.create_table(name, schema=SCHEMA, properties={"format-version": "2"})
    history = History(table)
    table.append(rows(0, 12))
    _step(history, "a1")
    table.append(rows(12, 12))
    _step(history, "a2")
    table.overwrite(rows(100, 6), overwrite_filter="id < 6")
    _step(history, "ow")
    table.delete("id = 20")
    _step(history, "cow")
    data_files = sorted(table.inspect.files()["file_path"].to_pylist())
    commit_position_deletes(table, {data_files[0]: [0, 1]})
    _step(history, "pos")
    commit_equality_deletes(table, ["id"], [[15]])
    _step(history, "eq")
    commit_deletion_vector(table, data_files[1], [2])
    _step(history, "dv")
    table.manage_snapshots().create_tag(history.ids["pos"], "release").commit()
    table.append(rows(200, 6))
    _step(history, "a3")
    table.manage_snapshots().create_branch(history.ids["a3"], "audit").commit()
    table.append(rows(300, 6), branch="audit")
    audit = table.metadata.refs["audit"].snapshot_id
    history.ids["b1"] = audit
    after_clock_passes(table.snapshot_by_id(audit).timestamp_ms)
    table.append(rows(400, 6))
    _step(history, "a4")
    _statistics(history, "stats-a2", history.ids["a2"])
    _statistics(history, "stats-a4", history.ids["a4"])
    _statistics(history, "partition-stats-a2", history.ids["a2"], partition=True)
    history.table = catalog.load_table(name)
    return history


def exists(table: Table, path: str) -> bool:
    return Files(table).exists(path)


def spelled(table: Table, path: str) -> str:
    """``path`` as its scheme spells it (a bare local path gets ``file://``)."""
    return path if Uri.parse(path).scheme else f"file://{path}"
