"""Test-only DAGs (the second DAG bundle of the test session): two maintenance tasks on one table.

``lease_holder`` removes the orphans of ``demo.orders`` but, once it holds the table's lease,
waits for the test's go-ahead (``$ICEBERG_MAINT_TEST_LEASE_DIR/release``; it writes ``held``
there first). ``lease_waiter`` expires the same table's snapshots meanwhile. ``lease_stalled``
removes the orphans under a 2 s lease and, once its plan is made, stops its whole process
(SIGSTOP; it writes its pid to ``paused`` first) until the test continues it. The state store is
``$ICEBERG_MAINT_TEST_STATE_URL`` (read at parse time).
"""

from __future__ import annotations

import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Context

from airflow_iceberg_maint.airflow.maintenance_run import Staged
from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator, PreparedRun

STATE_URL = os.environ.get("ICEBERG_MAINT_TEST_STATE_URL")
LEASE_DIR = Path(os.environ.get("ICEBERG_MAINT_TEST_LEASE_DIR", "/nonexistent"))
WAIT_SECONDS = 120


class HoldingRemoval(IcebergRemoveOrphanFilesOperator):
    """Orphan removal that, holding the lease, waits for the test before it runs."""

    def maintain(self, context: Context) -> dict[str, Any]:
        (LEASE_DIR / "held").write_text(str(os.getpid()))
        deadline = time.monotonic() + WAIT_SECONDS
        while not (LEASE_DIR / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {LEASE_DIR / 'release'} within {WAIT_SECONDS} s")
            time.sleep(0.05)
        return super().maintain(context)


class StallingRemoval(IcebergRemoveOrphanFilesOperator):
    """Orphan removal whose process stops (as a frozen worker would) between its plan and its deletes."""

    def _prepare(self, context: Context) -> PreparedRun:
        run = super()._prepare(context)
        save = run.saved.stage

        def stall(report: Staged, stage: str) -> None:
            save(report, stage)
            if stage == "planned":
                (LEASE_DIR / "paused").write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGSTOP)

        run.saved.stage = stall  # type: ignore[method-assign]
        return run


with DAG(dag_id="lease_stalled", schedule=None, start_date=datetime(2026, 1, 1)):
    StallingRemoval(task_id="remove_orphan_files", table="demo.orders", state_url=STATE_URL, lease_ttl=2)

with DAG(dag_id="lease_holder", schedule=None, start_date=datetime(2026, 1, 1)):
    HoldingRemoval(task_id="remove_orphan_files", table="demo.orders", state_url=STATE_URL)

with DAG(dag_id="lease_waiter", schedule=None, start_date=datetime(2026, 1, 1)):
    IcebergExpireSnapshotsOperator(
        task_id="expire_snapshots",
        table="demo.orders",
        older_than_days=0,
        retain_last=1,
        state_url=STATE_URL,
        lease_poll_interval=0.1,
        lease_timeout=WAIT_SECONDS,
    )
