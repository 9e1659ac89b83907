"""Demo writer: append rows to ``demo.events`` and declare the table's asset as an outlet.

Trigger it by hand (the form asks how many rows). Each run commits one snapshot, creating the
namespace and table on the first run. Its outlet marks the ``demo.events`` asset as updated, so
``iceberg_index_maintenance_event_triggered`` runs next, even before its watchers poll; the
watchers see the same commit in the catalog and add nothing that run has not done.

The outlet references the asset by name: the maintenance DAG defines it with its watchers, and
a second definition here without them would make the DAG processor drop and re-add the watchers
at every parse.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa
from airflow.sdk import DAG, Asset, Param, task

from airflow_iceberg_maint.airflow.catalog import DEFAULT_CONN_ID, catalog_for
from airflow_iceberg_maint.airflow.table_assets import table_asset_name

TABLE = "demo.events"
KINDS = ("click", "view", "purchase", "signup")
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("kind", pa.string())])

with DAG(
    dag_id="iceberg_demo_writer",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["iceberg", "demo"],
    doc_md=__doc__,
    params={"rows": Param(100, type="integer", minimum=1, maximum=1_000_000, title="Rows to append")},
):

    @task(outlets=[Asset.ref(name=table_asset_name(DEFAULT_CONN_ID, TABLE))])
    def append_rows(params: dict | None = None) -> dict:
        """Append ``rows`` rows whose ids continue after the table's current row count."""
        catalog = catalog_for(DEFAULT_CONN_ID)
        catalog.create_namespace_if_not_exists("demo")
        table = catalog.create_table_if_not_exists(TABLE, SCHEMA)
        snapshot = table.current_snapshot()
        start = int(snapshot.summary["total-records"]) if snapshot and snapshot.summary else 0
        rows = int((params or {})["rows"])
        ids = list(range(start, start + rows))
        table.append(pa.table({"id": ids, "kind": [KINDS[i % len(KINDS)] for i in ids]}, schema=SCHEMA))
        committed = table.current_snapshot()
        return {"table": TABLE, "snapshot_id": committed.snapshot_id, "first_id": start, "rows": rows}

    append_rows()
