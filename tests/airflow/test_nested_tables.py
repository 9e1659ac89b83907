"""The scheduled DAG keeps a table nested in another's location whole, with one catalog pass per run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from tests.airflow.helpers import task_states, xcom
from tests.support.airflow_dags import DAGS, remover

SCHEDULED = "iceberg_orphan_cleanup_scheduled"


def _nested(catalog: SqlCatalog, outer: str) -> tuple[str, set[Path]]:
    location = f"{catalog.load_table(outer).location()}/data/nested"
    table = catalog.create_table("other.nested", pa.schema([("id", pa.int64())]), location=location)
    table.append(pa.table({"id": [7, 8, 9]}))
    root = Path(location.removeprefix("file://"))
    return location, {p for p in root.rglob("*") if p.is_file()}


def test_scheduled_run_shares_one_catalog_pass_and_keeps_a_nested_table(demo_tables: dict, catalog: SqlCatalog):
    catalog.create_namespace("other")
    nested_location, nested_files = _nested(catalog, "demo.orders")
    run = DagBag(dag_folder=str(DAGS)).get_dag(SCHEDULED).test()
    assert run.state == "success"
    jobs = xcom(SCHEDULED, run.run_id, "plan_due_tables")
    [uri] = {job["other_tables_uri"] for job in jobs}
    shared = json.loads(Path(uri.removeprefix("file://")).read_text())
    assert sorted(t["table"] for t in shared["tables"]) == ["demo.events", "demo.orders", "other.nested"]

    states = task_states(SCHEDULED, run.run_id)
    summaries = {}
    for task, index in states:
        if task == "remove_orphan_files":
            summary = xcom(SCHEDULED, run.run_id, task, map_index=index)
            summaries[summary["table"]] = summary
    assert summaries["demo.orders"]["protected_location_count"] == 1
    assert summaries["demo.events"]["protected_location_count"] == 0
    report = json.loads(Path(summaries["demo.orders"]["report"].removeprefix("file://")).read_text())
    assert report["orphan_files"] == [demo_tables["demo.orders"]["old_uri"]]
    assert report["protected_locations"] == [
        {"location": nested_location, "reason": f"table other.nested writes under {nested_location!r}"}
    ]
    assert {p for p in Path(nested_location.removeprefix("file://")).rglob("*") if p.is_file()} == nested_files
    assert len(catalog.load_table("other.nested").scan().to_arrow()) == 3
    for planted in demo_tables.values():
        assert not planted["old"].exists() and planted["fresh"].exists()


def test_removal_tops_up_a_saved_pass_with_tables_created_since(
    demo_tables: dict, catalog: SqlCatalog, context: Context, tmp_path: Path, state_url: str
):
    # A pass saved before the nested table existed: the task loads the tables created since.
    from airflow_iceberg_maint.reachability.other_tables import catalog_table_paths, save_table_paths

    uri = save_table_paths(f"file://{tmp_path}/pass.json", catalog_table_paths(catalog), {})
    catalog.create_namespace("other")
    nested_location, nested_files = _nested(catalog, "demo.orders")
    operator = remover(state_url, tmp_path, table="demo.orders", other_tables_uri=uri)
    summary = operator.execute(context)
    assert (summary["orphan_file_count"], summary["protected_location_count"]) == (1, 1)
    assert {p for p in Path(nested_location.removeprefix("file://")).rglob("*") if p.is_file()} == nested_files


def test_removal_with_an_unreadable_pass_lists_the_catalog_itself(
    demo_tables: dict, catalog: SqlCatalog, context: Context, tmp_path: Path, state_url: str
):
    catalog.create_namespace("other")
    _nested(catalog, "demo.orders")
    operator = remover(
        state_url, tmp_path, table="demo.orders", other_tables_uri=f"file://{tmp_path}/missing.json", dry_run=True
    )
    assert operator.execute(context)["protected_location_count"] == 1


def test_only_this_table_is_a_checked_boolean(
    demo_tables: dict, catalog: SqlCatalog, context: Context, tmp_path: Path, state_url: str
):
    operator = remover(state_url, tmp_path, table="demo.orders", only_this_table="maybe")
    with pytest.raises(AirflowFailException, match="only_this_table"):
        operator.execute(context)
