"""Start-up benchmark: how long ``iceberg-maint`` takes to answer, against the interpreter's own start.

    .venv/bin/python bench/start.py              # 7 runs of each command, the median printed
    .venv/bin/python bench/start.py --repeat 15

Each command runs as a user runs it, in a fresh process (the ``iceberg-maint`` script beside this
interpreter): ``--version``, ``--help``, and dry runs of ``orphans`` and ``expire-snapshots`` on a
tiny table (a SQLite catalog and two appends of one row, built once in a temporary folder, the
catalog named by ``PYICEBERG_CATALOG__DEFAULT__*`` variables, the state store a file there too).
Two floors run in the same rounds: ``python -c pass`` with the same interpreter, and pyiceberg alone
loading the tiny table (``load_catalog("default").load_table``), which any command that reads a
table pays. Bytecode is written to a folder of the run (``PYTHONPYCACHEPREFIX``) and one untimed
round goes first, so that every timed run reads compiled modules as an installed package does
(``PYTHONDONTWRITEBYTECODE`` is dropped for the children). Runs are interleaved (one of each command
a round) so that a busy machine slows them alike; the median and the minimum of each are kept, in
seconds of wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

SCRIPT = Path(sys.executable).with_name("iceberg-maint")


def tiny_table(work: Path) -> dict[str, str]:
    """A table of two one-row appends; returns the environment that names its catalog."""
    warehouse = work / "warehouse"
    warehouse.mkdir()
    uri = f"sqlite:///{work}/catalog.db"
    catalog = SqlCatalog("default", uri=uri, warehouse=f"file://{warehouse}")
    catalog.create_namespace("db")
    rows = pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["a"], pa.string())})
    table = catalog.create_table("db.tiny", schema=rows.schema)
    table.append(rows)
    table.append(rows)
    return {
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": uri,
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{warehouse}",
        "ICEBERG_MAINT_STATE_URL": f"sqlite:///{work}/state.db",
    }


def run_once(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``command``, which must exit 0."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, **tiny_table(Path(folder)), "PYTHONPYCACHEPREFIX": f"{folder}/pycache"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cli, only = [str(SCRIPT)], ["--only-this-table"]
        load = "from pyiceberg.catalog import load_catalog; load_catalog('default').load_table('db.tiny')"
        commands = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "pyiceberg load_table (floor of a dry run)": [sys.executable, "-c", load],
            "iceberg-maint --version": [*cli, "--version"],
            "iceberg-maint --help": [*cli, "--help"],
            "orphans db.tiny --dry-run --json": [*cli, "orphans", "db.tiny", "--dry-run", "--json", *only],
            "expire-snapshots db.tiny --dry-run --json": [*cli, "expire-snapshots", "db.tiny", "--dry-run", "--json"],
        }
        for command in commands.values():
            run_once(command, env)  # compiles and caches the bytecode
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                times[name].append(run_once(command, env))
    print(f"{'command':45} {'median s':>9} {'min s':>7}  ({args.repeat} runs each, interleaved)")
    for name, seconds in times.items():
        print(f"{name:45} {statistics.median(seconds):9.3f} {min(seconds):7.3f}")


if __name__ == "__main__":
    main()
