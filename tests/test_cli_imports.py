"""What ``iceberg-maint`` imports to answer: never Airflow on the command line, and nothing heavy to parse.

Each command runs in a fresh interpreter (``sys.modules`` starts empty), as a user runs it, and
prints the modules it ended with. Structural, never timed: ``bench/start.py`` times them.

- ``--version``, ``--help`` and every subcommand's ``--help`` load none of pyiceberg, pyarrow,
  pandas, SQLAlchemy, botocore, pydantic, rich nor Airflow: the parser is built from
  ``cli.parsers``, and a subcommand's module is imported only once its arguments parsed.
- A dry run of ``orphans`` and ``expire-snapshots`` on a local table loads no Airflow, and no S3
  client machinery (``boto3``, ``botocore.session``, ``botocore.credentials``): the table is not on S3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

#: Packages a command that touches no table must not load (the roots of their module names).
HEAVY = {"pyiceberg", "pyarrow", "pandas", "numpy", "sqlalchemy", "botocore", "boto3", "pydantic", "rich", "yaml"}
#: The command line loads Airflow only for ``--conn-id``.
AIRFLOW = {"airflow"}
#: What building an S3 client loads (a table off S3 needs none of it).
S3_CLIENT = {"boto3", "botocore.session", "botocore.credentials"}

_REPORT = """
import json, sys
from airflow_iceberg_maint.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
print("\\n" + json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""

HELP_COMMANDS = [
    ["--version"],
    ["--help"],
    ["orphans", "--help"],
    ["expire-snapshots", "--help"],
    ["due", "--help"],
    ["policy", "--help"],
    ["policy", "validate", "--help"],
    ["index", "--help"],
    *(["index", name, "--help"] for name in ("create", "list", "refresh", "lag", "lookup", "expire")),
    ["index", "remove-unreferenced", "--help"],
]


def loaded(argv: list[str]) -> tuple[int, set[str]]:
    """The exit status of ``iceberg-maint ARGV`` in a fresh interpreter, and the roots of the modules it loaded
    (with the S3 client modules of ``S3_CLIENT`` by their full names)."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    report = json.loads(done.stdout.rstrip("\n").rpartition("\n")[2])
    modules: list[str] = report["modules"]
    roots = {name.split(".")[0] for name in modules}
    # The provider's own Airflow modules count as Airflow: they import it.
    roots |= {"airflow" for name in modules if name.startswith("airflow_iceberg_maint.airflow")}
    return report["status"], roots | (S3_CLIENT & set(modules))


@pytest.mark.parametrize("argv", HELP_COMMANDS, ids=lambda argv: " ".join(argv))
def test_help_and_version_load_nothing_heavy(argv: list[str]) -> None:
    status, roots = loaded(argv)
    assert status == 0
    assert roots & (HEAVY | AIRFLOW) == set()


def test_a_usage_error_loads_nothing_heavy() -> None:
    status, roots = loaded(["orphans", "db.t", "--max-concurrent-deletes", "0"])
    assert status == 2
    assert roots & (HEAVY | AIRFLOW) == set()


@pytest.fixture
def tiny_table(sqlite_catalog: SqlCatalog, tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__WAREHOUSE", f"file://{warehouse}")
    table = sqlite_catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2]}))
    table.append(pa.table({"id": [3]}))
    return "db.t"


@pytest.mark.parametrize(
    "argv",
    [["orphans", "--dry-run", "--only-this-table"], ["expire-snapshots", "--dry-run"]],
    ids=lambda argv: argv[0],
)
def test_a_dry_run_of_a_local_table_loads_no_airflow_nor_an_s3_client(tiny_table: str, argv: list[str]) -> None:
    status, roots = loaded([argv[0], tiny_table, *argv[1:], "--json"])
    assert status == 0
    assert "pyiceberg" in roots  # it did read the table
    assert roots & (AIRFLOW | S3_CLIENT) == set()
