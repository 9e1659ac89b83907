"""``iceberg-maint rewrite-manifests`` as a user runs it: a subprocess with pyiceberg env config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.catalog import load_table
from tests.compaction.test_rewrite_manifests import make_table
from tests.expiry.history import snapshot_rows
from tests.orphans.test_cli import _env, _run

CLI_KEYS = ["table", "dry_run", "rewritten_manifests", "added_manifests", "commits"]


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    return catalog


def test_json_dry_run_then_real_run(tmp_path: Path, catalog: SqlCatalog) -> None:
    table = make_table(catalog, partitioned=True, equality=True)
    name = ".".join(table.name())
    before = snapshot_rows(table)
    env = {**_env(tmp_path), "ICEBERG_MAINT_STATE_URL": f"sqlite:///{tmp_path}/state.db"}
    dry = _run(env, "rewrite-manifests", name, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert list(planned) == CLI_KEYS
    assert planned["dry_run"] is True and planned["commits"] == [] and planned["rewritten_manifests"] > 0
    assert load_table(catalog, name).metadata_location == table.metadata_location

    real = _run(env, "rewrite-manifests", name, "--target-manifest-size-mb", "8", "--json")
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    after = load_table(catalog, name)
    assert done == {**planned, "dry_run": False, "commits": [after.metadata.current_snapshot_id]}
    rows = snapshot_rows(after)
    assert (
        rows[f"snapshot:{after.metadata.current_snapshot_id}"]
        == before[f"snapshot:{table.metadata.current_snapshot_id}"]
    )

    text = _run(env, "rewrite-manifests", name)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"table {name}: rewrote 0 manifests into 0")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--target-manifest-size-mb", "0"],
            "argument --target-manifest-size-mb: expected a number of MB > 0, got '0'",
        ),
        (
            ["--target-manifest-size-mb", "x"],
            "argument --target-manifest-size-mb: expected a number of MB > 0, got 'x'",
        ),
    ],
)
def test_bad_input_exits_2_naming_it_and_changes_nothing(
    tmp_path: Path, catalog: SqlCatalog, args: list[str], message: str
) -> None:
    table = make_table(catalog, partitioned=False, equality=False)
    name = ".".join(table.name())
    result = _run(_env(tmp_path), "rewrite-manifests", name, *args)
    assert result.returncode == 2 and message in result.stderr and result.stdout == ""
    assert load_table(catalog, name).metadata_location == table.metadata_location


def test_a_bad_table_property_and_a_missing_table_exit_2_with_one_line(tmp_path: Path, catalog: SqlCatalog) -> None:
    table = make_table(catalog, partitioned=False, equality=False)
    name = ".".join(table.name())
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.target-size-bytes": "8MB"})
    location = load_table(catalog, name).metadata_location
    env = {**_env(tmp_path), "ICEBERG_MAINT_STATE_URL": f"sqlite:///{tmp_path}/state.db"}
    result = _run(env, "rewrite-manifests", name)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "iceberg-maint rewrite-manifests: table property commit.manifest.target-size-bytes '8MB': "
        "expected a whole number of bytes >= 1"
    ]
    assert load_table(catalog, name).metadata_location == location
    missing = _run(env, "rewrite-manifests", "db.nope", "--dry-run")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "db.nope" in missing.stderr
