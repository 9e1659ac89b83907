"""How ``iceberg-maint`` finds its catalog: ``--conn-id`` (an Airflow connection, built as the operators
build it), ``--catalog`` with a name containing ``_`` from ``PYICEBERG_CATALOG__*`` variables, and the
one-line errors for a catalog or connection that is not configured.

Commands run as subprocesses, as a user runs them, in an environment of their own: no inherited
``PYICEBERG_*``/``AIRFLOW_*`` variables, ``HOME`` and the working directory in the test's directory
(so no ``.pyiceberg.yaml`` of the user is read), and an ``AIRFLOW_HOME`` of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

from airflow_iceberg_maint.catalog import catalog_properties
from airflow_iceberg_maint.cli import main
from airflow_iceberg_maint.index.metadata.store import IndexStore

SCRIPT = Path(sys.executable).with_name("iceberg-maint")


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("PYICEBERG_", "AIRFLOW"))}
    env.update(
        HOME=str(tmp_path),
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        ICEBERG_MAINT_STATE_URL=f"sqlite:///{tmp_path}/cleanup-state.db",
    )
    env.update(extra)
    return env


def cli(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


def run_json(env: dict[str, str], cwd: Path, *argv: str) -> dict:
    done = cli(env, cwd, *argv, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1, done.stdout  # one JSON object, nothing else on stdout
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr.rstrip("\n")


def sql_catalog(name: str, tmp_path: Path) -> SqlCatalog:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir(exist_ok=True)
    return SqlCatalog(name, uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{warehouse}")


def table_with_rows(catalog: SqlCatalog) -> Table:
    catalog.create_namespace("db")
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 2, 3]}))
    return table


@pytest.fixture
def my_conn(tmp_path: Path) -> tuple[Table, dict[str, str]]:
    """A table in the SQLite catalog ``my_conn`` and the environment defining the connection ``my_conn``
    in JSON form: the catalog URI in ``host`` as the UI puts it, the rest in the extra.

    ``IcebergHook`` names the catalog after the connection id and a SQL catalog sees only its own
    name's tables, so the table is reachable only through a catalog named ``my_conn``.
    """
    table = table_with_rows(sql_catalog("my_conn", tmp_path))
    connection = {
        "conn_type": "iceberg",
        "host": f"sqlite:///{tmp_path}/catalog.db",
        "extra": {"type": "sql", "warehouse": f"file://{tmp_path}/warehouse"},
    }
    return table, clean_env(tmp_path, AIRFLOW_CONN_MY_CONN=json.dumps(connection))


def test_conn_id_json_variable_creates_and_lists_an_index(my_conn: tuple[Table, dict], tmp_path: Path) -> None:
    _, env = my_conn
    created = run_json(env, tmp_path, "--conn-id", "my_conn", "index", "create", "db.t", "by_id", "--ordering", "id")
    listed = run_json(env, tmp_path, "--conn-id", "my_conn", "index", "list", "db.t")

    assert listed == {
        "table": "db.t",
        "indexes": [
            {
                "name": "by_id",
                "metadata_location": created["metadata_location"],
                "index_uuid": created["index_uuid"],
                "ordering": ["id"],
                "extracts": 0,
                "newest_extract_snapshot_id": None,
            }
        ],
    }
    # The command wrote into the catalog the connection names, not a catalog of its own.
    store = IndexStore(sql_catalog("my_conn", tmp_path).load_table("db.t"))
    assert store.names() == ["by_id"]
    assert store.load("by_id")[1] == created["metadata_location"]


def test_conn_id_json_variable_orphans_dry_run(my_conn: tuple[Table, dict], tmp_path: Path) -> None:
    table, env = my_conn
    orphan = Path(table.location().removeprefix("file://")) / "data" / "stray.parquet"
    orphan.write_bytes(b"0123456789")
    old = time.time() - 10 * 86_400
    os.utime(orphan, (old, old))
    cutoff = (datetime.now(UTC) - timedelta(days=3)).replace(microsecond=0)

    report = run_json(
        env, tmp_path, "--conn-id", "my_conn", "orphans", "db.t", "--dry-run", "--older-than", cutoff.isoformat()
    )

    contract = {
        key: report[key]
        for key in (
            "table",
            "location",
            "older_than",
            "dry_run",
            "orphan_file_count",
            "orphan_bytes",
            "deleted_file_count",
            "failed",
            "conflicts",
            "orphan_files",
        )
    }
    assert contract == {
        "table": "db.t",
        "location": table.location(),
        "older_than": cutoff.isoformat(),
        "dry_run": True,
        "orphan_file_count": 1,
        "orphan_bytes": 10,
        "deleted_file_count": 0,
        "failed": [],
        "conflicts": [],
        "orphan_files": [f"file://{orphan}"],
    }
    assert orphan.exists()


def prod_connection(tmp_path: Path, **extra: object) -> dict[str, str]:
    """The connection ``iceberg_default`` to the SQLite catalog whose tables were registered as ``prod``."""
    connection = {
        "conn_type": "iceberg",
        "host": f"sqlite:///{tmp_path}/catalog.db",
        "extra": {"type": "sql", "warehouse": f"file://{tmp_path}/warehouse", **extra},
    }
    return clean_env(tmp_path, AIRFLOW_CONN_ICEBERG_DEFAULT=json.dumps(connection))


def test_conn_id_catalog_name_finds_tables_registered_under_another_name(tmp_path: Path) -> None:
    table = table_with_rows(sql_catalog("prod", tmp_path))
    orphan = Path(table.location().removeprefix("file://")) / "data" / "stray.parquet"
    orphan.write_bytes(b"x")
    old = time.time() - 10 * 86_400
    os.utime(orphan, (old, old))

    missing = one_line_error(
        cli(prod_connection(tmp_path), tmp_path, "--conn-id", "iceberg_default", "orphans", "db.t", "--dry-run")
    )
    assert missing == "iceberg-maint orphans: table 'db.t': not found in catalog 'iceberg_default'"

    env = prod_connection(tmp_path, catalog_name="prod")
    report = run_json(env, tmp_path, "--conn-id", "iceberg_default", "orphans", "db.t")
    assert report["orphan_files"] == [f"file://{orphan}"] and report["deleted_file_count"] == 1
    assert not orphan.exists()
    created = run_json(
        env, tmp_path, "--conn-id", "iceberg_default", "index", "create", "db.t", "by_id", "--ordering", "id"
    )
    assert IndexStore(sql_catalog("prod", tmp_path).load_table("db.t")).load("by_id")[1] == created["metadata_location"]


def test_conn_id_catalog_name_must_be_a_name(tmp_path: Path) -> None:
    table_with_rows(sql_catalog("prod", tmp_path))
    done = cli(
        prod_connection(tmp_path, catalog_name=7), tmp_path, "--conn-id", "iceberg_default", "index", "list", "db.t"
    )
    assert one_line_error(done) == (
        "iceberg-maint index: connection 'iceberg_default': extra 'catalog_name' must be a non-empty string, got 7"
    )


def test_conn_id_uri_variable(tmp_path: Path) -> None:
    table_with_rows(sql_catalog("uri_conn", tmp_path))
    query = f"type=sql&uri={quote(f'sqlite:///{tmp_path}/catalog.db', safe='')}&warehouse=" + quote(
        f"file://{tmp_path}/warehouse", safe=""
    )
    env = clean_env(tmp_path, AIRFLOW_CONN_URI_CONN=f"iceberg://?{query}")

    assert run_json(env, tmp_path, "--conn-id", "uri_conn", "index", "list", "db.t") == {"table": "db.t", "indexes": []}


def test_conn_id_not_defined_says_what_to_set(tmp_path: Path) -> None:
    done = cli(clean_env(tmp_path), tmp_path, "--conn-id", "nope", "index", "list", "db.t", "--json")

    assert one_line_error(done) == (
        "iceberg-maint index: connection 'nope' is not defined: set AIRFLOW_CONN_NOPE to JSON such as "
        '{"conn_type": "iceberg", "host": CATALOG_URI, "extra": {"type": ..., "warehouse": ...}}, or a URI, '
        "or define it in a secrets backend"
    )


def test_conn_id_without_catalog_uri_says_where_it_goes(tmp_path: Path) -> None:
    env = clean_env(tmp_path, AIRFLOW_CONN_HALF='{"conn_type": "iceberg", "extra": {"type": "sql"}}')

    done = cli(env, tmp_path, "--conn-id", "half", "index", "list", "db.t", "--json")

    assert one_line_error(done) == (
        "iceberg-maint index: connection 'half': no catalog URI: "
        'set the connection\'s host (Catalog URI) or "uri" in its extra'
    )


def test_catalog_named_with_underscore_from_env_vars(tmp_path: Path) -> None:
    # The catalog the Airflow connection iceberg_default makes: its tables are registered under "iceberg_default".
    table_with_rows(sql_catalog("iceberg_default", tmp_path))
    env = clean_env(
        tmp_path,
        PYICEBERG_CATALOG__ICEBERG_DEFAULT__TYPE="sql",
        PYICEBERG_CATALOG__ICEBERG_DEFAULT__URI=f"sqlite:///{tmp_path}/catalog.db",
        PYICEBERG_CATALOG__ICEBERG_DEFAULT__WAREHOUSE=f"file://{tmp_path}/warehouse",
    )

    created = run_json(
        env,
        tmp_path,
        "--catalog",
        "iceberg_default",
        "index",
        "create",
        "db.t",
        "by_id",
        "--ordering",
        "bucket(4, id), id",
    )

    assert created["ordering"] == ["bucket(4, id)", "id"]
    store = IndexStore(sql_catalog("iceberg_default", tmp_path).load_table("db.t"))
    assert store.names() == ["by_id"]


def test_underscore_name_variables_apply_over_the_yaml_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".pyiceberg.yaml").write_text(
        "catalog:\n"
        "  iceberg_default:\n    type: sql\n    uri: sqlite:////nowhere/old.db\n    warehouse: file:///wh\n"
        "  iceberg-default:\n    uri: sqlite:////elsewhere.db\n"
    )
    for name in [k for k in os.environ if k.upper().startswith("PYICEBERG_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))
    monkeypatch.setenv("PYICEBERG_CATALOG__ICEBERG_DEFAULT__URI", "sqlite:////new.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__ICEBERG_DEFAULT__S3__ACCESS_KEY_ID", "key")
    monkeypatch.setenv("PYICEBERG_CATALOG__ICEBERG__URI", "sqlite:////other-catalog.db")

    # The yaml entry of exactly this name, with this name's variables over it; the "-" entry is another catalog.
    assert catalog_properties("iceberg_default") == {
        "type": "sql",
        "uri": "sqlite:////new.db",
        "warehouse": "file:///wh",
        "s3.access-key-id": "key",
    }
    assert catalog_properties("iceberg-default") == {"uri": "sqlite:////new.db", "s3.access-key-id": "key"}
    assert catalog_properties("iceberg") == {"uri": "sqlite:////other-catalog.db"}
    assert catalog_properties("nosuch") is None


def test_catalog_not_configured_says_what_to_set(tmp_path: Path) -> None:
    done = cli(clean_env(tmp_path), tmp_path, "--catalog", "iceberg_default", "index", "list", "db.t", "--json")

    message = one_line_error(done)
    assert message == (
        "iceberg-maint index: catalog 'iceberg_default' is not configured: set "
        "PYICEBERG_CATALOG__ICEBERG_DEFAULT__TYPE, PYICEBERG_CATALOG__ICEBERG_DEFAULT__URI and "
        "PYICEBERG_CATALOG__ICEBERG_DEFAULT__WAREHOUSE (e.g. sql, sqlite:////path/catalog.db, "
        "file:///path/warehouse), add 'iceberg_default' under 'catalog:' in .pyiceberg.yaml "
        "(in $PYICEBERG_HOME, ~ or the current directory), or use --conn-id with an Airflow connection "
        "instead of --catalog"
    )
    assert "--uri" not in message


def test_default_catalog_not_configured(tmp_path: Path) -> None:
    done = cli(clean_env(tmp_path), tmp_path, "orphans", "db.t", "--dry-run", "--json")

    assert one_line_error(done).startswith(
        "iceberg-maint orphans: catalog 'default' is not configured: set PYICEBERG_CATALOG__DEFAULT__TYPE, "
    )


def test_catalog_without_uri_does_not_advise_a_uri_flag(tmp_path: Path) -> None:
    env = clean_env(tmp_path, PYICEBERG_CATALOG__HALF_DONE__TYPE="sql")

    done = cli(env, tmp_path, "--catalog", "half_done", "index", "list", "db.t", "--json")

    assert one_line_error(done) == (
        "iceberg-maint index: catalog 'half_done': no catalog URI: "
        "set PYICEBERG_CATALOG__HALF_DONE__URI or 'uri' under catalog 'half_done' in .pyiceberg.yaml"
    )


def test_catalog_pyiceberg_cannot_load_is_one_line(tmp_path: Path) -> None:
    bad_type = cli(
        clean_env(tmp_path, PYICEBERG_CATALOG__BROKEN__TYPE="bogus"),
        tmp_path,
        "--catalog",
        "broken",
        "index",
        "list",
        "db.t",
        "--json",
    )
    assert one_line_error(bad_type) == (
        "iceberg-maint index: catalog 'broken': cannot be loaded: 'bogus' is not a valid CatalogType"
    )

    missing_dir = f"sqlite:///{tmp_path}/no-such-dir/catalog.db"
    unreachable = cli(
        clean_env(tmp_path, PYICEBERG_CATALOG__BROKEN__URI=missing_dir),
        tmp_path,
        "--catalog",
        "broken",
        "index",
        "list",
        "db.t",
        "--json",
    )
    assert one_line_error(unreachable).startswith(
        "iceberg-maint index: catalog 'broken': cannot be loaded: "
        "(sqlite3.OperationalError) unable to open database file"
    )


def test_catalog_and_conn_id_together_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--catalog", "prod", "--conn-id", "iceberg_default", "index", "list", "db.t", "--json"]) == 2

    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "iceberg-maint index: --catalog prod and --conn-id iceberg_default: give one of them "
        "(--catalog: a pyiceberg catalog; --conn-id: an Airflow connection)\n"
    )
