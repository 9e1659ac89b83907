"""The ``iceberg-maint`` command run in this process (its own parser, catalog and state store, as a user's run),
against the SQLite catalog of the ``sqlite_catalog`` fixture."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_iceberg_maint.cli import main
from tests.support.health import Ran


@pytest.fixture
def cli(
    tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__DEFAULT__WAREHOUSE", f"file://{warehouse}")

    def run(*args: str) -> Ran:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run
