"""The orphan-removal operator through an ``iceberg`` connection of type ``rest`` whose catalog vends the
S3 credentials (``tests.vending``): the connection holds the catalog's OAuth2 client and no S3 keys, and
the task's default AWS chain is an identity the store refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow.sdk import Context

from tests.orphans.catalog_cases import cutoff_after_writes
from tests.support.airflow_dags import remover
from tests.vending import OUTSIDER, VendedTable, VendingServer

pytestmark = pytest.mark.rest


def test_operator_lists_and_deletes_with_vended_credentials(
    vending_seaweed: VendingServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, context: Context
) -> None:
    vended = VendedTable(vending_seaweed)
    login, password = vended.config["credential"].split(":")
    extra = {k: v for k, v in vended.config.items() if k not in ("uri", "credential")}
    assert not any(k.startswith("s3.") and ("key" in k or "token" in k) for k in extra)
    connection = {"conn_type": "iceberg", "host": vended.config["uri"], "login": login, "password": password}
    monkeypatch.setenv("AIRFLOW_CONN_VENDING", json.dumps({**connection, "extra": extra}))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", OUTSIDER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", OUTSIDER[1])
    assert vended.refusal(*OUTSIDER) == "AccessDenied"
    cutoff = cutoff_after_writes()
    before = vended.keys()

    state_url = f"sqlite:///{tmp_path}/state.db"
    args = {"table": "db.t", "iceberg_conn_id": "vending", "older_than": cutoff.isoformat(), "allow_recent_files": True}

    dry = remover(state_url, tmp_path, dry_run=True, **args).execute(context)
    assert (dry["orphan_file_count"], dry["deleted_file_count"], dry["failed_count"]) == (2, 0, 0)
    report = json.loads(Path(dry["report"].removeprefix("file://")).read_text())
    assert sorted(report["orphan_files"]) == sorted(vended.orphans)
    assert vended.keys() == before

    real = remover(state_url, tmp_path, dry_run=False, **args).execute(context)
    assert (real["orphan_file_count"], real["deleted_file_count"], real["failed_count"]) == (2, 2, 0)
    assert vended.keys() == before - vended.orphans
