"""The "Iceberg maintenance" page of the Airflow UI: a FastAPI app in the api-server and a nav entry.

Every page route requires an authenticated Airflow user (the UI's session cookie or a bearer token),
checked by Airflow's own security dependency; the static files (``ui/static``: style sheet, the
trigger form's script) hold no data. A page view reads the stored facts in bulk (``ui.records``)
and the policy and index-definition files; it never calls a catalog. Pages, rendered from the Jinja
templates of ``ui/templates``:

* ``status``: one row per table, worst health first (health score and its causes, every policy
  covering it, orphan removal's and expiry's due state and last runs, a picture of the bytes each
  run reclaimed, index lags with their history, a trigger button) and the recent runs of every kind;
* ``fleet``: every table of the configured catalogs (``catalog_conn_ids``), worst health first;
* ``table?name=``: one table: its file-size histogram, live files by kind, score per health check,
  bytes reclaimed and files removed per run, each index's lag per check, and every recorded run
  with its kind and phase timings;
* ``report?uri=``: one run's report in its kind's layout (``ui.report_views``), read from the
  ``report_location`` base only;
* ``trigger?table=``: the manual DAG's parameters as a form, pre-filled from the query string,
  that triggers a run through Airflow's REST API with the user's own session (Airflow 3.3's trigger
  dialog cannot be pre-filled from a URL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.reports import read_report
from airflow_iceberg_maint.airflow.ui.catalog_tables import catalog_listing
from airflow_iceberg_maint.airflow.ui.records import current_rows
from airflow_iceberg_maint.airflow.ui.render import page
from airflow_iceberg_maint.airflow.ui.report_views import report_view
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.fs.locations import validate_location

URL_PREFIX = "/iceberg-maint"
RECENT_RUNS = 25  # runs of all tables listed under the status table
STATIC = Path(__file__).resolve().parent / "ui" / "static"

app = FastAPI(title="Iceberg maintenance")
pages = APIRouter(dependencies=[Depends(requires_authenticated())])


@pages.get("/status", response_class=HTMLResponse)
def status_page() -> HTMLResponse:
    rows, problems = current_rows()
    recent = sorted(((s.table, r) for s in rows for r in s.runs), key=lambda item: item[1].order, reverse=True)
    return page("status.html", title="Iceberg maintenance", rows=rows, problems=problems, recent=recent[:RECENT_RUNS])


@pages.get("/status.json")
def status_json() -> JSONResponse:
    rows, problems = current_rows()
    return JSONResponse({"problems": problems, "tables": [r.to_json() for r in rows]})


@pages.get("/table", response_class=HTMLResponse)
def table_page(name: str = Query(...)) -> HTMLResponse:
    rows, _ = current_rows()
    status = next((s for s in rows if s.table == name), None)
    if status is None:
        raise HTTPException(status_code=404, detail=f"no table {name!r} in the policies, definitions or records")
    runs = [(status.table, run) for run in reversed(status.runs)]
    return page("table.html", title=f"Iceberg maintenance: {name}", status=status, runs=runs)


def _report_io_properties() -> dict[str, str]:
    """Storage properties from the ``report_conn_id`` connection's extra (the catalog's own, read once)."""
    from airflow.models.connection import Connection

    try:
        extra = Connection.get_connection_from_secrets(config.report_conn_id()).extra_dejson
    except Exception:  # no such connection: local reports need no properties
        return {}
    return {str(k): str(v) for k, v in extra.items() if not isinstance(v, dict | list)}


@pages.get("/report", response_class=HTMLResponse)
def report_page(uri: str = Query(...), raw: bool = False) -> Any:
    base = config.report_location()
    try:
        validate_location(uri, base)  # only reports under the configured base: no other file is served
    except MaintenanceError as exc:
        raise HTTPException(status_code=404, detail=f"not a report under {base}") from exc
    try:
        report = read_report(uri, _report_io_properties())
    except (OSError, ValueError) as exc:
        raise HTTPException(status_code=404, detail=f"report {uri} cannot be read: {exc}") from exc
    if raw:
        return JSONResponse(report)
    template, context = report_view(report)
    return page(template, title=f"Report {report.get('table')}", uri=uri, **context)


@pages.get("/fleet", response_class=HTMLResponse)
def fleet_page() -> HTMLResponse:
    rows, problems = current_rows(fleet=True)
    listing = catalog_listing()
    catalog_of = {table: conn for conn, tables in listing.tables.items() for table in tables}
    return page(
        "fleet.html",
        title="Iceberg maintenance: fleet",
        rows=rows,
        problems=problems,
        catalogs=list(listing.tables),
        catalog_of=catalog_of,
    )


@pages.get("/trigger", response_class=HTMLResponse)
def trigger_page() -> HTMLResponse:
    dag_id = config.manual_dag_id()
    return page("trigger.html", title=f"Trigger {dag_id}", dag_id=dag_id)


app.include_router(pages)
app.mount("/static", StaticFiles(directory=STATIC), name="static")


class IcebergMaintenancePlugin(AirflowPlugin):
    name = "iceberg_maint"
    # Lists, as AirflowPlugin declares them (instance attributes to type checkers, so no ClassVar).
    fastapi_apps = [  # noqa: RUF012
        {"app": app, "url_prefix": URL_PREFIX, "name": "Iceberg maintenance"}
    ]
    external_views = [  # noqa: RUF012
        {
            "name": "Iceberg maintenance",
            "href": URL_PREFIX.lstrip("/") + "/status",
            "url_route": "iceberg-maintenance",
            "destination": "nav",
            "category": "browse",
        }
    ]
