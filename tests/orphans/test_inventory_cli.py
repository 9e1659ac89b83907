"""``iceberg-maint orphans --listing SOURCE`` as a user runs it, on a table of the local S3 server."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from tests.orphans.inventories import bucket_objects, inventory_time, s3_client_of, write_s3_inventory
from tests.orphans.scenario import SCHEMA, Files, rows
from tests.orphans.test_cli import _run
from tests.support.services import S3_PROPS


def _s3_table(tmp_path: Path, endpoint: str, bucket: str):
    props = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"s3://{bucket}/warehouse"}
    props.update({"s3.endpoint": endpoint, **S3_PROPS})
    env = {**os.environ, "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql"}
    for key, value in props.items():  # pyiceberg reads s3.access-key-id from ..._S3__ACCESS_KEY_ID
        env["PYICEBERG_CATALOG__DEFAULT__" + key.upper().replace(".", "__").replace("-", "_")] = value
    catalog = SqlCatalog("default", **props)
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", schema=SCHEMA)
    table.append(rows(0, 5))
    files = Files(table)
    orphans = {files.put(f"{table.location()}/data/orphan-{i}.parquet") for i in range(3)}
    return table, orphans, env


def test_listing_deletes_exactly_the_orphans(tmp_path, s3_endpoint, s3_bucket):
    table, orphans, env = _s3_table(tmp_path, s3_endpoint, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time()
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "CSV", created)
    args = ["orphans", "db.t", "--listing", manifest, "--older-than", created.isoformat(), "--only-this-table"]
    dry = _run(env, *args, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    # One LIST: data/metadata/, the metadata folder of the one folder holding orphans (S8).
    assert set(out["orphan_files"]) == orphans and out["list_calls"] == 1
    real = _run(env, *args, "--json")
    assert real.returncode == 0, real.stderr
    assert json.loads(real.stdout)["deleted_file_count"] == 3
    assert not any(Files(table).exists(o) for o in orphans)


def test_a_cutoff_later_than_the_inventory_exits_2_and_changes_nothing(tmp_path, s3_endpoint, s3_bucket):
    table, orphans, env = _s3_table(tmp_path, s3_endpoint, s3_bucket)
    s3 = s3_client_of(table)
    created = inventory_time() - timedelta(days=4)  # older than the default cutoff, 3 days
    manifest = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "Parquet", created)
    result = _run(env, "orphans", "db.t", "--listing", manifest, "--json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"iceberg-maint orphans: listing {manifest}: taken at {created.isoformat()}")
    assert "nothing was deleted" in result.stderr
    assert all(Files(table).exists(o) for o in orphans)
