"""Full orphan-removal reports, written as JSON files or objects next to (never inside) tables.

XCom carries only a summary; the complete orphan list goes to ``<base>/<dag>/<run>/<table>.json``
(a dry run's to ``<table>.dry-run.json``: in a reviewed run the dry run a person approved and the
run that executed the approval each keep their own file, S16) through pyiceberg's FileIO, so any
location the catalog can write (local, ``s3://``) works. The
base is the operator's ``report_location``, else the ``[iceberg_maint] report_location`` option,
which the status page reads too. A run writes its report before it deletes anything (stage
``planned``) and again when it ends (``done``) or fails (with ``error``), so the files a run
would delete stay visible whatever happens after the listing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pyiceberg.catalog import Catalog
from pyiceberg.io import load_file_io

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.shared_storage import require_shared_location
from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError, MaintenanceError
from airflow_iceberg_maint.fs.locations import validate_location
from airflow_iceberg_maint.reachability.other_tables import TablePaths, catalog_table_paths, save_table_paths

_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")
#: What to change when a report location is refused (``shared_storage``).
REPORT_SETTING = "the task's report_location or [iceberg_maint] report_location"


class TaskLog(Protocol):
    """What the reports need of a logger: the standard library's and the task's own (structlog) both fit."""

    def info(self, msg: str, /, *args: Any) -> Any: ...

    def warning(self, msg: str, /, *args: Any) -> Any: ...

    def error(self, msg: str, /, *args: Any) -> Any: ...


def default_report_base() -> str:
    """``[iceberg_maint] report_location``, else ``$AIRFLOW_HOME/iceberg_maint/reports`` as a ``file://`` URI."""
    return config.report_location()


def report_uri(base: str, dag_id: str, run_id: str, table: str, map_index: int | None, *, dry_run: bool = False) -> str:
    """One report per task try target: a retry overwrites the report of the failed try.

    A dry run's report has a name of its own, so no real run of the same DAG run writes over it.
    """
    name = _UNSAFE.sub("_", table) + (".dry-run" if dry_run else "")
    name += f".{map_index}" if map_index is not None and map_index >= 0 else ""
    return f"{base.rstrip('/')}/{_UNSAFE.sub('_', dag_id)}/{_UNSAFE.sub('_', run_id)}/{name}.json"


def refuse_inside_table(base: str, table_location: str, table: str | None = None) -> None:
    """A report under a table's location would itself look like an orphan file of that table."""
    try:
        validate_location(base, table_location)
    except LocationRefusedError:
        return
    owner = f" of {table}" if table else ""
    raise InvalidInputError(f"report location {base!r}: is inside the table location {table_location!r}{owner}")


def refuse_inside_tables(base: str, tables: Iterable[TablePaths]) -> None:
    """Refuse a base under any location, data path or metadata path of these tables."""
    for paths in tables:
        for path in paths.paths:
            refuse_inside_table(base, path, paths.table)


def write_report(uri: str, body: Mapping[str, Any], io_properties: Mapping[str, str]) -> str:
    """Write (or overwrite) one report as JSON."""
    data = json.dumps(body, indent=1, default=str).encode("utf-8")
    if uri.startswith("file://"):
        Path(uri.removeprefix("file://")).parent.mkdir(parents=True, exist_ok=True)
    with load_file_io(dict(io_properties), uri).new_output(uri).create(overwrite=True) as out:
        out.write(data)
    return uri


def share_catalog_pass(catalog: Catalog, dag_id: str, run_id: str, base: str | None, log: TaskLog) -> str | None:
    """Save one catalog pass for every removal task of this run; None when it cannot be made or saved.

    Each removal task then loads only the tables created since, instead of the whole catalog.
    Without it, each task makes its own pass (and refuses when the catalog cannot be listed).
    """
    base = base or default_report_base()
    require_shared_location(base, "report location", REPORT_SETTING)  # the removal tasks may run elsewhere
    uri = report_uri(base, dag_id, run_id, "catalog-tables", None)
    try:
        paths = catalog_table_paths(catalog)
    except MaintenanceError as exc:
        log.warning("catalog pass not shared (%s): each removal task lists the catalog itself", exc)
        return None
    refuse_inside_tables(base, paths)
    try:
        save_table_paths(uri, paths, dict(catalog.properties))
    except (MaintenanceError, OSError) as exc:
        log.warning("catalog pass not shared (%s): each removal task lists the catalog itself", exc)
        return None
    log.info("catalog pass of %d tables shared with the removal tasks: %s", len(paths), uri)
    return uri


def read_report(uri: str, io_properties: Mapping[str, str]) -> dict[str, Any]:
    with load_file_io(dict(io_properties), uri).new_input(uri).open() as stream:
        report: dict[str, Any] = json.loads(stream.read())
    return report
