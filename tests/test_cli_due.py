"""``iceberg-maint due`` and ``policy validate`` as a user runs them, on a real SQLite catalog.

Commands that open the catalog run as subprocesses: pyiceberg reads its environment
configuration once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.cli import main
from airflow_iceberg_maint.state.cleanup import SqlStateStore

POLICY: dict[str, Any] = {
    "name": "weekly",
    "type": "system_iceberg_orphan_file_removal",
    "minIntervalDays": 7,
    "tables": ["db.*"],
    "content": {"olderThanDays": 3},
}
EXPIRY = {
    "name": "expire_daily",
    "type": "system_iceberg_snapshot_expiry",
    "enabled": True,
    "minIntervalDays": 1,
    "tables": ["db.*"],
    "content": {"olderThanDays": 5, "retainLast": 1, "dryRun": False},
}


@pytest.fixture
def cli_env(sqlite_catalog: SqlCatalog, tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__WAREHOUSE", f"file://{warehouse}")
    monkeypatch.setenv("ICEBERG_MAINT_STATE_URL", f"sqlite:///{tmp_path}/state.db")
    table = sqlite_catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    return Path(table.location().removeprefix("file://"))


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("iceberg-maint")
    return subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=120, check=False)


def run_json(*argv: str) -> dict:
    done = cli(*argv, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    return json.loads(done.stdout)


def old_orphan(table_dir: Path, name: str) -> Path:
    path = table_dir / "data" / name
    path.write_bytes(b"x" * 10)
    old = time.time() - 10 * 86_400
    os.utime(path, (old, old))
    return path


def test_never_cleaned_table_is_due(cli_env: Path) -> None:
    result = run_json("due", "db.t")
    assert result["table"] == "db.t"
    assert result["policy"] is None
    assert result["last_cleanup_at"] is None and result["days_since_last_cleanup"] is None
    assert result["min_interval_days"] == 7
    assert result["due"] is True and result["score"] == 1_000_000
    assert result["reason"] == "never cleaned: due"
    assert result["policies"] == []


def test_real_orphans_run_records_the_cleanup_and_dry_run_does_not(cli_env: Path, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(POLICY))
    orphan = old_orphan(cli_env, "stray.parquet")

    dry = run_json("orphans", "db.t", "--dry-run")
    assert dry["orphan_files"] == [f"file://{orphan}"]
    assert run_json("due", "db.t", "--policy", str(policy_file))["due"] is True

    real = run_json("orphans", "db.t")
    assert real["deleted_file_count"] == 1 and not orphan.exists()
    after = run_json("due", "db.t", "--policy", str(policy_file))
    assert after["policy"] == "weekly"
    assert after["due"] is False
    assert after["last_cleanup_at"] is not None
    assert 0 <= after["days_since_last_cleanup"] < 0.01
    assert after["reason"].endswith("interval 7 days: not due")


def test_due_with_a_policy_that_does_not_attach(cli_env: Path, tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("name: sales\ntype: system_iceberg_orphan_file_removal\ntables: ['sales.*']\n")
    result = run_json("due", "db.t", "--policy", str(policy_file))
    assert result["due"] is False and result["policy"] is None
    assert "attaches to db.t" in result["reason"]


def test_due_errors_name_the_input(cli_env: Path, tmp_path: Path) -> None:
    missing = cli("due", "db.missing", "--json")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "table 'db.missing': not found" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: p\ntype: system_iceberg_orphan_file_removal\ncontent: {olderThanDays: -2}\n")
    refused = cli("due", "db.t", "--policy", str(bad))
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    assert "bad.yaml" in refused.stderr and "content.olderThanDays" in refused.stderr


def test_policy_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "policies.json"
    good.write_text(json.dumps([POLICY, {**POLICY, "name": "other", "enabled": False}]))
    assert main(["policy", "validate", str(good), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is True
    assert [p["name"] for p in result["policies"]] == ["weekly", "other"]
    assert result["policies"][0]["content"] == {"olderThanDays": 3.0, "location": None, "dryRun": False}
    assert main(["policy", "validate", str(good)]) == 0
    assert capsys.readouterr().out.strip() == f"{good}: 2 valid policies: weekly, other"

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**POLICY, "type": "custom_thing"}))
    assert main(["policy", "validate", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown policy type 'custom_thing'" in captured.err


def test_due_lists_each_policy_of_the_table(cli_env: Path, tmp_path: Path, sqlite_catalog: SqlCatalog) -> None:
    policy_file = tmp_path / "policies.json"
    policy_file.write_text(json.dumps([POLICY, EXPIRY]))
    uuid = str(sqlite_catalog.load_table("db.t").metadata.table_uuid)
    assert run_json("due", "db.t", "--policy", str(policy_file)) == {
        "table": "db.t",
        "table_uuid": uuid,
        "policy": "weekly",
        "last_cleanup_at": None,
        "days_since_last_cleanup": None,
        "min_interval_days": 7.0,
        "due": True,
        "score": 1_000_000.0,
        "reason": "never cleaned: due",
        "policies": [
            {
                "policy": "weekly",
                "type": "system_iceberg_orphan_file_removal",
                "due": True,
                "last_run_at": None,
                "days_since_last_run": None,
                "min_interval_days": 7.0,
                "reason": "never cleaned: due",
                "score": 1_000_000.0,
            },
            {
                "policy": "expire_daily",
                "type": "system_iceberg_snapshot_expiry",
                "due": True,
                "last_run_at": None,
                "days_since_last_run": None,
                "min_interval_days": 1.0,
                "reason": "never expired: due",
                "score": 1_000_000.0,
            },
        ],
    }
    text = cli("due", "db.t", "--policy", str(policy_file))
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        "db.t: due (never cleaned: due), score 1e+06",
        "  policy 'weekly' (system_iceberg_orphan_file_removal): due (never cleaned: due)",
        "  policy 'expire_daily' (system_iceberg_snapshot_expiry): due (never expired: due)",
    ]


def test_expiry_policy_alone_leaves_the_orphan_keys_unattached(cli_env: Path, tmp_path: Path) -> None:
    policy_file = tmp_path / "expiry.yaml"
    policy_file.write_text(json.dumps(EXPIRY))
    result = run_json("due", "db.t", "--policy", str(policy_file))
    assert (result["policy"], result["due"], result["score"]) == (None, False, 0.0)
    assert result["reason"] == f"no orphan-removal policy in {policy_file} attaches to db.t: not due"
    assert [(p["policy"], p["due"], p["reason"]) for p in result["policies"]] == [
        ("expire_daily", True, "never expired: due")
    ]


def test_a_real_expiry_moves_only_the_expiry_clock(cli_env: Path, tmp_path: Path) -> None:
    policy_file = tmp_path / "policies.json"
    policy_file.write_text(json.dumps([POLICY, EXPIRY]))

    dry = run_json("expire-snapshots", "db.t", "--dry-run")
    assert dry["dry_run"] is True
    assert [p["due"] for p in run_json("due", "db.t", "--policy", str(policy_file))["policies"]] == [True, True]

    real = run_json("expire-snapshots", "db.t", "--older-than-days", "0")
    assert real["failed"] == []
    after = run_json("due", "db.t", "--policy", str(policy_file))
    assert (after["policy"], after["due"], after["last_cleanup_at"]) == ("weekly", True, None)
    orphans, expiry = after["policies"]
    assert (orphans["policy"], orphans["due"], orphans["last_run_at"]) == ("weekly", True, None)
    assert (expiry["policy"], expiry["due"]) == ("expire_daily", False)
    assert expiry["last_run_at"] is not None and 0 <= expiry["days_since_last_run"] < 0.01
    assert expiry["reason"].startswith("last expired ") and expiry["reason"].endswith(" ago, interval 1 day: not due")

    [state] = SqlStateStore().all("system_iceberg_snapshot_expiry")
    assert (state.table, state.last_attempt_status, state.last_attempt_dry_run) == ("db.t", "success", False)
    assert state.last_success_at == state.last_attempt_at
    assert state.last_attempt_counts == {
        "expired_snapshot_count": 0,
        "deleted_file_count": 0,
        "deleted_bytes": 0,
        "failed_count": 0,
    }


def test_policy_validate_accepts_both_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "policies.json"
    good.write_text(json.dumps([POLICY, EXPIRY]))
    assert main(["policy", "validate", str(good), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(p["name"], p["type"]) for p in result["policies"]] == [
        ("weekly", "system_iceberg_orphan_file_removal"),
        ("expire_daily", "system_iceberg_snapshot_expiry"),
    ]
    assert result["policies"][1]["content"] == {"olderThanDays": 5.0, "retainLast": 1, "dryRun": False}

    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**EXPIRY, "content": {"retainLast": 0}}))
    assert main(["policy", "validate", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"iceberg-maint policy: policy file {str(bad)!r}: policy 'expire_daily' content.retainLast: "
        "expected a whole number >= 1, got 0\n"
    )


def test_policy_validate_checks_the_memory_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "policies.json"
    good.write_text(json.dumps({**POLICY, "content": {**POLICY["content"], "memoryBudgetMb": 64}}))
    assert main(["policy", "validate", str(good), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policies"][0]["content"]["memoryBudgetMb"] == 64

    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({**POLICY, "content": {"memoryBudgetMb": 0.5}}))
    assert main(["policy", "validate", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"iceberg-maint policy: policy file {str(bad)!r}: policy 'weekly' content.memoryBudgetMb: "
        "expected a whole number >= 1, got 0.5\n"
    )
