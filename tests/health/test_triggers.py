"""Policies with ``trigger`` and ``score``: ``policy validate`` refuses what the grammar does not hold, ``due``
evaluates the trigger once the minimum interval has passed and says why, and the planning orders due tables
by the score expression. Without them ``due`` is as before (tests/policy and tests/test_cli_due.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.policy.job_config import plan_expiry_jobs
from airflow_iceberg_maint.policy.policies import SNAPSHOT_EXPIRY, parse_policies
from airflow_iceberg_maint.state.cleanup import SqlStateStore, record_attempt
from tests.health.tables import SCHEMA, batch
from tests.support.health import Ran


def _policy_file(tmp_path: Path, **fields: Any) -> str:
    body = {"name": "expire", "type": SNAPSHOT_EXPIRY, "tables": ["db.*"], "minIntervalDays": 1, **fields}
    path = tmp_path / "policy.json"
    path.write_text(json.dumps([body]))
    return str(path)


def _smalls(catalog: SqlCatalog, name: str, files: int) -> None:
    table = catalog.create_table(name, schema=SCHEMA)
    for i in range(files):
        table.append(batch("a", i, 1))


def test_validate_refuses_bad_expressions_in_one_line(tmp_path: Path, cli: Callable[..., Ran]) -> None:
    good = cli("policy", "validate", _policy_file(tmp_path, trigger="small_files > 100 or expirable_bytes > 10 GiB"))
    assert good.code == 0, good.err
    assert (
        cli("policy", "validate", _policy_file(tmp_path, score="100 - score"), "--json").json["policies"][0]["score"]
        == "100 - score"
    )
    for fields, message in (
        ({"trigger": "small_filez > 3"}, "policy 'expire'.trigger 'small_filez > 3': unknown name 'small_filez'"),
        ({"trigger": "small_files >"}, "expected a number, a name or '(' at the end"),
        ({"trigger": "small_files"}, "must be a truth value"),
        ({"score": "score > 3"}, "policy 'expire'.score 'score > 3': must be a number"),
        ({"trigger": 5}, "trigger: expected an expression as a string, got 5"),
    ):
        ran = cli("policy", "validate", _policy_file(tmp_path, **fields))
        assert (ran.code, ran.out) == (2, ""), fields
        assert ran.err.count("\n") == 1 and message in ran.err, (fields, ran.err)


def test_due_evaluates_the_trigger_and_says_why(
    tmp_path: Path, sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]
) -> None:
    _smalls(sqlite_catalog, "db.t", 5)
    trigger = "small_files > 3 and days_since_last_run >= 1"
    ran = cli("due", "db.t", "--policy", _policy_file(tmp_path, trigger=trigger), "--json")
    assert ran.code == 0, ran.err
    [policy] = ran.json["policies"]
    assert policy["due"] is True and policy["trigger"] == trigger and policy["trigger_value"] is True
    assert policy["trigger_values"] == {"days_since_last_run": 1_000_000.0, "small_files": 5}
    assert f"trigger {trigger!r} is true (days_since_last_run=1e+06, small_files=5): due" in policy["reason"]

    quiet = cli("due", "db.t", "--policy", _policy_file(tmp_path, trigger="expirable_bytes > 10 GiB"), "--json")
    [policy] = quiet.json["policies"]
    assert (policy["due"], policy["trigger_value"], policy["trigger_values"]) == (False, False, {"expirable_bytes": 0})
    assert policy["reason"].endswith("is false (expirable_bytes=0): not due")


def test_the_minimum_interval_still_holds(tmp_path: Path, sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]) -> None:
    _smalls(sqlite_catalog, "db.t", 5)
    table = sqlite_catalog.load_table("db.t")
    uuid = str(table.metadata.table_uuid)
    record_attempt(
        SqlStateStore(),
        table_uuid=uuid,
        table="db.t",
        at=datetime.now(UTC),
        dry_run=False,
        succeeded=True,
        job=SNAPSHOT_EXPIRY,
    )
    for fields in ({"trigger": "small_files > 3"}, {"trigger": "small_files > 3", "score": "small_files * 2"}):
        ran = cli("due", "db.t", "--policy", _policy_file(tmp_path, **fields), "--json")
        [policy] = ran.json["policies"]
        # The trigger holds, but the interval has not passed: not due, the trigger not asked.
        assert (policy["due"], policy["trigger_value"]) == (False, None), fields
        assert policy["reason"].endswith("interval 1 day: not due")
        assert policy["score"] == (10.0 if "score" in fields else policy["days_since_last_run"])


def test_without_a_trigger_due_prints_what_it_always_printed(
    tmp_path: Path, sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]
) -> None:
    _smalls(sqlite_catalog, "db.t", 1)
    [policy] = cli("due", "db.t", "--policy", _policy_file(tmp_path), "--json").json["policies"]
    assert sorted(policy) == sorted(
        ["policy", "type", "due", "last_run_at", "days_since_last_run", "min_interval_days", "reason", "score"]
    )


def test_the_score_expression_orders_the_due_tables(sqlite_catalog: SqlCatalog, tmp_path: Path) -> None:
    for name, files in (("db.a", 1), ("db.b", 4), ("db.c", 2)):
        _smalls(sqlite_catalog, name, files)
    store, now = SqlStateStore(), datetime.now(UTC)
    base = {"name": "expire", "type": SNAPSHOT_EXPIRY, "tables": ["db.*"]}

    def order(**fields: Any) -> list[str]:
        plan = plan_expiry_jobs(sqlite_catalog, parse_policies([{**base, **fields}]), store, now)
        return [job.table for job, _ in plan.jobs]

    assert order() == ["db.a", "db.b", "db.c"]  # never run: equal scores, the catalog's order
    assert order(score="small_files") == ["db.b", "db.c", "db.a"]
    assert order(score="small_files", trigger="small_files >= 2") == ["db.b", "db.c"]


def test_a_caller_reading_no_statistics_gets_the_clocks_verdict_and_is_told() -> None:
    from airflow_iceberg_maint.policy.due import evaluate

    [policy] = parse_policies([{"name": "p", "type": SNAPSHOT_EXPIRY, "tables": ["db.*"], "trigger": "score < 50"}])
    evaluation = evaluate("db.t", "uuid", policy, None, datetime.now(UTC))
    assert (evaluation.due, evaluation.trigger, evaluation.trigger_value) == (True, "score < 50", None)
    assert evaluation.reason == "never expired: due (trigger and score not evaluated here)"


def test_a_trigger_reads_the_compaction_clock(
    tmp_path: Path, sqlite_catalog: SqlCatalog, cli: Callable[..., Ran]
) -> None:
    _smalls(sqlite_catalog, "db.t", 5)
    policy = _policy_file(tmp_path, trigger="days_since_last_compaction < 1")
    before = cli("due", "db.t", "--policy", policy, "--json")
    assert before.code == 0, before.err
    [never] = before.json["policies"]
    assert (never["due"], never["trigger_values"]) == (False, {"days_since_last_compaction": 1_000_000.0})

    compacted = cli("rewrite-data-files", "db.t", "--target-file-size-mb", "1", "--json")
    assert compacted.code == 0, compacted.err
    assert compacted.json["rewritten_data_files"] == 5
    after = cli("due", "db.t", "--policy", policy, "--json")
    [fresh] = after.json["policies"]
    assert fresh["due"] is True
    assert 0 <= fresh["trigger_values"]["days_since_last_compaction"] < 0.01
