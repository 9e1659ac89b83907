"""``[iceberg_maint] digest_cache_location``: the orphan-removal and expiry tasks keep and reuse digests (S22).

The orphan task's dry run fills the cache; the expiry's dry runs with and without it find the same
files; a location that names no local folder fails the task without a retry, changing nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.airflow.operators.expiry import IcebergExpireSnapshotsOperator
from tests.support.airflow_dags import remover

OPTION = "AIRFLOW__ICEBERG_MAINT__DIGEST_CACHE_LOCATION"


def _expiry_dry_run(state_url: str, tmp_path: Path, context: Context, cutoff: str) -> list[str]:
    summary = IcebergExpireSnapshotsOperator(
        task_id="expire",
        state_url=state_url,
        report_location=f"file://{tmp_path}/reports",
        table="demo.orders",
        older_than=cutoff,
        retain_last=1,
        dry_run=True,
    ).execute(context)
    report = json.loads(Path(summary["report"].removeprefix("file://")).read_text())
    return sorted(report["deleted_files"])


def test_the_tasks_fill_and_reuse_the_configured_cache(
    demo_tables: dict,
    catalog: SqlCatalog,
    state_url: str,
    tmp_path: Path,
    context: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "digests"
    table = catalog.load_table("demo.orders")
    lists = {s.manifest_list for s in table.metadata.snapshots}
    cutoff = datetime.now(UTC).isoformat()
    uncached = _expiry_dry_run(state_url, tmp_path, context, cutoff)
    assert not cache.exists()

    monkeypatch.setenv(OPTION, f"file://{cache}")
    remover(state_url, tmp_path, table="demo.orders", dry_run=True).execute(context)
    assert len(list(cache.rglob("*.list"))) == len(lists)
    assert list(cache.rglob("*.manifest"))
    assert _expiry_dry_run(state_url, tmp_path, context, cutoff) == uncached
    assert set(uncached) == lists - {table.current_snapshot().manifest_list}


def test_a_location_that_is_no_local_folder_fails_the_task_and_changes_nothing(
    demo_tables: dict,
    catalog: SqlCatalog,
    state_url: str,
    tmp_path: Path,
    context: Context,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(OPTION, "s3://ops/digests")
    before = catalog.load_table("demo.orders").metadata_location
    with pytest.raises(AirflowFailException, match=r"\[iceberg_maint\] digest_cache_location: cache location 's3://"):
        remover(state_url, tmp_path, table="demo.orders", dry_run=False).execute(context)
    assert demo_tables["demo.orders"]["old"].exists()
    assert catalog.load_table("demo.orders").metadata_location == before
