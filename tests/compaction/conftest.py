"""Fixtures of the compaction tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog


@pytest.fixture
def env(tmp_path: Path, sqlite_catalog: Catalog, warehouse: Path) -> dict[str, str]:
    """The environment of an ``iceberg-maint`` run on ``sqlite_catalog``."""
    return {
        **os.environ,
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{warehouse}",
    }
