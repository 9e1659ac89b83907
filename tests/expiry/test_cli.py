"""``iceberg-maint expire-snapshots`` as a user runs it: a subprocess with pyiceberg env config."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.state.cleanup import SqlStateStore
from tests.expiry.history import build_history, reachable
from tests.orphans.test_cli import _env, _run

CLI_KEYS = [
    "table",
    "older_than",
    "retain_last",
    "dry_run",
    "expired_snapshot_ids",
    "removed_refs",
    "deleted_files",
    "deleted_file_count",
    "deleted_bytes",
    "failed",
]


def _catalog(tmp_path) -> SqlCatalog:
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    return catalog


def test_json_dry_run_then_real_run(tmp_path) -> None:
    history = build_history(_catalog(tmp_path))
    env = _env(tmp_path)
    cutoff = datetime.now(UTC).isoformat()
    args = ["expire-snapshots", "db.events", "--older-than", cutoff, "--retain-last", "1", "--json"]
    dry = _run(env, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    out = json.loads(dry.stdout)
    assert list(out)[: len(CLI_KEYS)] == CLI_KEYS
    assert out["dry_run"] is True and out["retain_last"] == 1 and out["deleted_file_count"] > 0
    kept = {history.ids["a4"], history.ids["b1"], history.ids["pos"]}
    every = {s.snapshot_id for s in history.table.metadata.snapshots}
    assert out["expired_snapshot_ids"] == sorted(every - kept)
    assert all(os.path.exists(local_path(p)) for p in out["deleted_files"])

    real = _run(env, *args)
    assert real.returncode == 0, real.stderr
    done = json.loads(real.stdout)
    assert {k: done[k] for k in CLI_KEYS if k != "dry_run"} == {k: out[k] for k in CLI_KEYS if k != "dry_run"}
    assert not any(os.path.exists(local_path(p)) for p in done["deleted_files"])


def test_failed_deletes_exit_3_with_the_json_printed(tmp_path) -> None:
    history = build_history(_catalog(tmp_path))
    table = history.table
    before = reachable(table)
    env = _env(tmp_path)
    # A data file of the first snapshot only, replaced by a directory: its delete fails on any user.
    (doomed,) = set(table.inspect.data_files(history.ids["a1"])["file_path"].to_pylist()) - set(
        table.inspect.data_files(history.ids["pos"])["file_path"].to_pylist()
    )  # rewritten by the overwrite
    os.remove(local_path(doomed))
    os.makedirs(local_path(doomed) + "/inside")

    result = _run(env, "expire-snapshots", "db.events", "--older-than-days", "0", "--json")

    assert result.returncode == 3, result.stderr
    out = json.loads(result.stdout)
    assert [f["path"] for f in out["failed"]] == [doomed] and "IsADirectoryError" in out["failed"][0]["error"]
    assert doomed not in out["deleted_files"] and out["deleted_file_count"] == len(out["deleted_files"]) > 0
    assert set(out["deleted_files"]) < before
    # Recorded as a failed attempt: the last-expiry clock of `due` does not move.
    state = SqlStateStore().get(out["table_uuid"], "system_iceberg_snapshot_expiry")
    assert (state.last_success_at, state.last_attempt_status, state.last_error) == (None, "failed", "1 deletes failed")
    assert state.last_attempt_counts["failed_count"] == 1


def test_bad_input_gets_a_one_line_error_naming_it(tmp_path) -> None:
    build_history(_catalog(tmp_path))
    env = _env(tmp_path)
    cases = [
        (["--older-than", "2999-01-01T00:00:00Z"], "--older-than 2999-01-01T00:00:00+00:00: is in the future"),
        (["--older-than-days", "-2"], "--older-than-days -2.0"),
        (["--retain-last", "0"], "--retain-last 0: expected a whole number >= 1"),
    ]
    for args, message in cases:
        result = _run(env, "expire-snapshots", "db.events", *args, "--json")
        assert result.returncode == 2 and result.stdout == "", args
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    missing = _run(env, "expire-snapshots", "db.nope", "--json")
    assert missing.returncode == 2 and "table 'db.nope': not found" in missing.stderr


def test_a_bad_state_url_is_refused_before_anything_is_expired(tmp_path) -> None:
    history = build_history(_catalog(tmp_path))
    before = [s.snapshot_id for s in history.table.metadata.snapshots]
    env = {**_env(tmp_path), "ICEBERG_MAINT_STATE_URL": "not a url"}
    result = _run(env, "expire-snapshots", "db.events", "--older-than-days", "0", "--json")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("iceberg-maint expire-snapshots: state store URL 'not a url': ")
    assert len(result.stderr.strip().splitlines()) == 1
    assert [s.snapshot_id for s in history.table.refresh().metadata.snapshots] == before
