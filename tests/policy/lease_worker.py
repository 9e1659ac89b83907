"""A run under a short table lease that stops its own process at a stage (``python -m tests.policy.lease_worker``).

It takes the lease as the command line does (``take``, ``held``), runs the real library call, and
at the stage named by ``pause`` writes ``<dir>/paused`` and sends itself SIGSTOP: the whole
process stops, its lease renewal too, as a process frozen by the scheduler, a VM pause or a long
GC would. The test resumes it with SIGCONT. The outcome goes to ``<dir>/result.json``.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.progress import reporting
from airflow_iceberg_maint.state.lease_fence import held
from airflow_iceberg_maint.state.leases import take
from airflow_iceberg_maint.state.sql_leases import SqlLeases

OWNER = "run A"


def _stop(directory: Path) -> None:
    (directory / "paused").write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGSTOP)


class _StopAtPhaseEnd:
    """A progress reporter that stops the process when ``phase`` ends (the index refresh has no stage hook)."""

    def __init__(self, phase: str, directory: Path) -> None:
        self.phase, self.directory = phase, directory

    def update(self, phase: str, done: int, total: int | None, finished: bool) -> None:
        if phase == self.phase and finished:
            _stop(self.directory)


def _work(spec: dict[str, Any], directory: Path) -> dict[str, Any]:
    table = SqlCatalog("default", uri=spec["catalog_uri"], warehouse=spec["warehouse"]).load_table(spec["table"])
    now = datetime.now(UTC)

    def at(stage: str) -> Any:
        return lambda _report, name: _stop(directory) if name == stage else None

    if spec["op"] == "orphans":
        report = remove_orphan_files(
            table, OrphanOptions(older_than=now), sources=[INDEX_FILES], on_stage=at("planned")
        )
        return {"deleted": report.deleted_file_count}
    if spec["op"] in ("expire-commit", "expire-delete"):
        stage = "retention" if spec["op"] == "expire-commit" else "planned"
        options = ExpireOptions(older_than=now, retain_last=1)
        expired = expire_snapshots(
            table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], now=now, on_stage=at(stage)
        )
        return {"deleted": len(expired.deleted_files)}
    with reporting(_StopAtPhaseEnd("building regions", directory)):
        return refresh_index(table, spec["index"]).to_json()


def main(spec: dict[str, Any]) -> None:
    directory = Path(spec["dir"])
    log = logging.getLogger("lease_worker")
    store, ttl = SqlLeases(spec["state_url"]), timedelta(seconds=spec["ttl"])
    lease = take(store, spec["table"], OWNER, ttl, 0, log)
    try:
        with held(store, lease, ttl, log):
            result = _work(spec, directory)
    except MaintenanceError as exc:
        result = {"error": type(exc).__name__, "message": str(exc)}
    (directory / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
    gc.collect()  # before pyarrow's teardown, as the command line's console() does
