"""One table history on every catalog type (SQLite, PostgreSQL, SeaweedFS's REST catalog), and the
``iceberg-maint`` command run against it as a user runs it: a subprocess configured by variables."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import StaticTable, Table

from tests.orphans.scenario import rows


@dataclass
class CatalogCase:
    """``catalog`` writes the tables; the command reaches catalog ``name`` through ``config``."""

    kind: str
    catalog: Catalog
    name: str
    config: dict[str, str]

    def env(self) -> dict[str, str]:
        """``PYICEBERG_CATALOG__<NAME>__<KEY>`` variables, keys spelled as pyiceberg reads them back."""
        prefix = f"PYICEBERG_CATALOG__{self.name.upper().replace('-', '_')}__"
        keys = {prefix + k.upper().replace(".", "__").replace("-", "_"): v for k, v in self.config.items()}
        return {**os.environ, **keys}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(sys.executable).parent / "iceberg-maint"), "--catalog", self.name, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=240,
        )

    def orphans(self, table: str, *args: str) -> dict[str, Any]:
        result = self.run("orphans", table, "--json", *args)
        assert result.returncode == 0, result.stderr
        report: dict[str, Any] = json.loads(result.stdout)
        return report


def whole_table(table: Table) -> StaticTable:
    """The table as its metadata file has it, read with pyiceberg alone: the oracle's view."""
    return StaticTable.from_metadata(table.metadata_location, dict(table.io.properties))


def hiding_history(table: Table) -> None:
    """Eight snapshots in one line of history; only the last is a ref's. The overwrite drops every earlier
    row, so the earlier snapshots' data files, manifests and manifest lists are theirs alone."""
    for i in range(5):
        table.append(rows(i * 10, 10))
    table.overwrite(rows(100, 4))  # a delete snapshot and an append snapshot
    table.append(rows(200, 3))


def cutoff_after_writes() -> datetime:
    """A cutoff later than every write so far, once it is no longer in the future.

    Stores keep whole seconds (SeaweedFS, S3) and may round up: one second past the next whole second.
    """
    now = datetime.now(UTC).timestamp()
    cutoff = datetime.fromtimestamp(math.floor(now) + 2, UTC)
    while datetime.now(UTC) <= cutoff:  # the command refuses a cutoff in the future
        time.sleep(0.05)
    return cutoff


def older_than(cutoff: datetime) -> tuple[str, str]:
    return "--older-than", cutoff.isoformat()
