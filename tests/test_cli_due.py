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

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.cli import main

POLICY = {
    "name": "weekly",
    "type": "system_iceberg_orphan_file_removal",
    "minIntervalDays": 7,
    "tables": ["db.*"],
    "content": {"olderThanDays": 3},
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
