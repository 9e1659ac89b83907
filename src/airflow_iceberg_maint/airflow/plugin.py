"""The "Iceberg maintenance" page of the Airflow UI: a FastAPI app in the api-server and a nav entry.

Every route requires an authenticated Airflow user (the UI's session cookie or a bearer token),
checked by Airflow's own security dependency. A page view reads the stored facts in bulk (one query
on the Variables, or on the ``state_url`` database) and the policy and index-definition files; it
never calls a catalog. Pages:

* ``status``: one row per table (policy, due, last run with its report, index lags, a trigger button);
* ``report?uri=``: one run's report, read from the ``report_location`` base only;
* ``trigger?table=``: the manual DAG's parameters as a form, pre-filled from the query string,
  that triggers a run through Airflow's REST API with the user's own session (Airflow 3.3's trigger
  dialog cannot be pre-filled from a URL).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from airflow.api_fastapi.core_api.security import requires_authenticated
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse, JSONResponse

from airflow_iceberg_maint.airflow import config
from airflow_iceberg_maint.airflow.reports import read_report
from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.fs.locations import validate_location
from airflow_iceberg_maint.maintenance.index_definitions import TableDefinition, load_index_definitions
from airflow_iceberg_maint.maintenance.status_records import SqlRecords
from airflow_iceberg_maint.maintenance.status_rows import Records, TableStatus, table_rows
from airflow_iceberg_maint.policy.policies import Policy, load_policies
from airflow_iceberg_maint.policy.state import SqlStateStore

URL_PREFIX = "/iceberg-maint"
REPORT_LIST_LIMIT = 10_000  # paths shown on the report page; the raw JSON has them all

app = FastAPI(title="Iceberg maintenance", dependencies=[Depends(requires_authenticated())])


@lru_cache(maxsize=8)
def _parsed(path: str, mtime: float, kind: str) -> tuple[Any, str | None]:
    """A definitions file parsed once per change (keyed by modification time)."""
    try:
        return (load_policies(path) if kind == "policies" else load_index_definitions(path)), None
    except MaintenanceError as exc:
        return [], str(exc)


def _load(path: Path, kind: str) -> tuple[Any, str | None]:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return [], None  # no such file: nothing of that kind is configured
    return _parsed(str(path), mtime, kind)


def _variable_rows() -> list[tuple[str, str]]:
    """Every ``iceberg_maint.*`` Variable, decrypted, in one query."""
    from airflow.models.crypto import get_fernet
    from airflow.models.variable import Variable
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = select(Variable.key, Variable._val, Variable.is_encrypted).where(Variable.key.like("iceberg_maint.%"))
    fernet = get_fernet()
    with create_session() as session:
        rows = session.execute(query).all()
    return [(key, fernet.decrypt(val.encode()).decode() if encrypted else val) for key, val, encrypted in rows if val]


def load_records() -> Records:
    url = config.state_url()
    if url:
        return Records.build(SqlStateStore(url).all(), SqlRecords(url).items())
    return Records.from_variables(_variable_rows())


def current_rows(now: datetime | None = None) -> tuple[list[TableStatus], list[str]]:
    """The rows and the problems found reading the definitions (shown above the table)."""
    policy_path, index_path = config.policy_file(), config.index_definitions_file()
    policies, policy_error = _load(policy_path, "policies")
    definitions, index_error = _load(index_path, "indexes")
    rows = table_rows(
        _typed(policies, Policy),
        _typed(definitions, TableDefinition),
        load_records(),
        now or datetime.now(UTC),
        source=str(policy_path),
    )
    return rows, [e for e in (policy_error, index_error) if e]


def _typed(items: Iterable[Any], kind: type) -> list[Any]:
    return [i for i in items if isinstance(i, kind)]


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(count)


def _when(iso: str | None) -> str:
    return iso[:19].replace("T", " ") + " UTC" if iso else ""


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1rem;color:#1a202c}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #e2e8f0;padding:.35rem .5rem;
text-align:left;vertical-align:top;font-size:.9rem}th{background:#f7fafc}
.due{color:#c05621;font-weight:600}.ok{color:#2f855a}.failed{color:#c53030;font-weight:600}
.lagging{color:#c05621}.muted{color:#718096}a.button{display:inline-block;padding:.2rem .6rem;border-radius:4px;
background:#3182ce;color:#fff;text-decoration:none}.problem{background:#fff5f5;border:1px solid #feb2b2;
padding:.5rem;margin-bottom:.5rem}code{font-size:.85rem}
"""


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def _last_run_cell(row: dict[str, Any]) -> str:
    run = row["last_run"]
    if run is None:
        return "<span class='muted'>no run yet</span>"
    counts = run["counts"]
    kind = "dry run" if run["dry_run"] else "real run"
    if run["status"] == "failed":
        outcome = f"<span class='failed'>failed</span>: {html.escape(run['error'] or '')}"
    elif run["dry_run"]:
        outcome = f"would delete {counts.get('orphan_file_count', 0)} files ({_size(counts.get('orphan_bytes', 0))})"
    else:
        outcome = (
            f"deleted {counts.get('deleted_file_count', 0)} files ({_size(counts.get('orphan_bytes', 0))} reclaimed)"
        )
    link = f" <a href='report?{urlencode({'uri': run['report']})}'>report</a>" if run["report"] else ""
    return f"{kind}, {_when(run['at'])}: {outcome}{link}"


def _index_cell(indexes: list[dict[str, Any]]) -> str:
    parts = []
    for index in indexes:
        lag, name = index["lag"], html.escape(index["name"])
        if lag is None:
            parts.append(f"{name}: <span class='muted'>not checked yet</span>")
            continue
        seconds = "" if lag.get("lag_seconds") is None else f", {lag['lag_seconds']:g} s"
        state = (
            "<span class='lagging'>lagging</span>" if lag.get("lagging") else "<span class='ok'>within bounds</span>"
        )
        parts.append(
            f"{name}: {lag.get('snapshots_behind')} snapshots behind{seconds}, {state} "
            f"<span class='muted'>(checked {_when(lag.get('checked_at'))})</span>"
        )
    return "<br>".join(parts) or "<span class='muted'>none</span>"


@app.get("/status", response_class=HTMLResponse)
def status_page() -> HTMLResponse:
    rows, problems = current_rows()
    body = ["<h2>Iceberg maintenance</h2>"]
    body += [f"<div class='problem'>{html.escape(p)}</div>" for p in problems]
    body.append(
        "<table id='tables'><thead><tr><th>Table</th><th>Policy</th><th>Due</th><th>Last run</th>"
        "<th>Indexes (lag)</th><th></th></tr></thead><tbody>"
    )
    for status in rows:
        row = status.to_json()
        days = row["days_since_last_cleanup"]
        since = "never cleaned" if days is None else f"{days:.1f} days since the last cleanup"
        due = "<span class='due'>due</span>" if row["due"] else "not due"
        table = html.escape(row["table"])
        body.append(
            f"<tr data-table='{table}'><td>{table}</td><td>{html.escape(row['policy'] or '—')}</td>"
            f"<td title='{html.escape(row['reason'])}'>{due}<br><span class='muted'>{since}</span></td>"
            f"<td>{_last_run_cell(row)}</td><td>{_index_cell(row['indexes'])}</td>"
            f"<td><a class='button' href='trigger?{urlencode({'table': row['table']})}'>Trigger…</a></td></tr>"
        )
    body.append("</tbody></table>")
    return _page("Iceberg maintenance", "".join(body))


@app.get("/status.json")
def status_json() -> JSONResponse:
    rows, problems = current_rows()
    return JSONResponse({"problems": problems, "tables": [r.to_json() for r in rows]})


def _report_io_properties() -> dict[str, str]:
    """Storage properties from the ``report_conn_id`` connection's extra (the catalog's own, read once)."""
    from airflow.models.connection import Connection

    try:
        extra = Connection.get_connection_from_secrets(config.report_conn_id()).extra_dejson
    except Exception:  # no such connection: local reports need no properties
        return {}
    return {str(k): str(v) for k, v in extra.items() if not isinstance(v, dict | list)}


@app.get("/report", response_class=HTMLResponse)
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
    files = report.get("orphan_files") or []
    verb = "would delete" if report.get("dry_run") else "deleted"
    body = [
        f"<h2>Report: {html.escape(str(report.get('table')))}</h2>",
        f"<p><a href='status'>← Iceberg maintenance</a> · <a href='report?{urlencode({'uri': uri, 'raw': 1})}'>"
        f"raw JSON</a> · <code>{html.escape(uri)}</code></p>",
    ]
    if report.get("error"):
        body.append(
            f"<div class='problem'>The run failed after listing (stage {html.escape(report['stage'])}): "
            f"{html.escape(report['error'])}. Nothing after this stage ran; the list below is what it "
            "had found.</div>"
        )
    body.append(
        f"<p id='summary'>{'Dry run' if report.get('dry_run') else 'Real run'} of "
        f"<code>{html.escape(str(report.get('location')))}</code>, files older than "
        f"{_when(report.get('older_than'))}, stage <b>{html.escape(str(report.get('stage')))}</b>: "
        f"{len(files)} orphan files ({_size(int(report.get('orphan_bytes') or 0))}); {verb} "
        f"{report.get('deleted_file_count') if not report.get('dry_run') else len(files)}.</p>"
    )
    by_kind = report.get("by_kind") or {}
    body.append(
        "<h3>By kind</h3><table><tr><th>Kind</th><th>Files</th><th>Bytes</th></tr>"
        + "".join(
            f"<tr><td>{html.escape(k)}</td><td>{v['count']}</td><td>{v['bytes']}</td></tr>"
            for k, v in by_kind.items()
            if v.get("count")
        )
        + "</table>"
    )
    for title, key in (
        ("Conflicts", "conflicts"),
        ("Protected locations", "protected_locations"),
        ("Failed deletes", "failed"),
    ):
        items = report.get(key) or []
        if items:
            body.append(
                f"<h3>{title}</h3><ul>"
                + "".join(f"<li><code>{html.escape(json.dumps(i))}</code></li>" for i in items)
                + "</ul>"
            )
    body.append(f"<h3>Timings (s)</h3><p><code>{html.escape(json.dumps(report.get('phase_seconds')))}</code></p>")
    shown = files[:REPORT_LIST_LIMIT]
    more = f" (first {len(shown)} of {len(files)}; the raw JSON has all)" if len(files) > len(shown) else ""
    body.append(
        f"<h3>Orphan files{more}</h3><ul id='orphans'>"
        + "".join(f"<li><code>{html.escape(f)}</code></li>" for f in shown)
        + "</ul>"
    )
    return _page(f"Report {report.get('table')}", "".join(body))


_TRIGGER_SCRIPT = """
const dagId = document.body.dataset.dag;
const api = "../api/v2/dags/" + encodeURIComponent(dagId);
const given = new URLSearchParams(location.search);
const form = document.getElementById("form");
function field(name, spec) {
  const schema = spec.schema || {};
  const types = [].concat(schema.type || "string");
  const row = document.createElement("p");
  const label = document.createElement("label");
  label.textContent = (schema.title || name) + " ";
  const input = document.createElement("input");
  input.name = name; input.id = "param-" + name;
  let value = given.has(name) ? given.get(name) : spec.value;
  if (types.includes("boolean")) {
    input.type = "checkbox";
    input.checked = given.has(name) ? given.get(name) === "true" : Boolean(spec.value);
  } else {
    input.type = types.includes("number") || types.includes("integer") ? "number" : "text";
    input.step = "any";
    input.value = value === null || value === undefined ? "" : value;
  }
  input.dataset.types = types.join(",");
  label.appendChild(input); row.appendChild(label);
  if (spec.description) { const d = document.createElement("small"); d.className = "muted";
    d.textContent = " " + spec.description; row.appendChild(d); }
  form.insertBefore(row, document.getElementById("submit"));
}
function conf() {
  const out = {};
  for (const input of form.querySelectorAll("input[name]")) {
    const types = input.dataset.types.split(",");
    if (input.type === "checkbox") out[input.name] = input.checked;
    else if (input.value === "" && types.includes("null")) out[input.name] = null;
    else if (input.type === "number") out[input.name] = Number(input.value);
    else out[input.name] = input.value;
  }
  return out;
}
fetch(api + "/details", {credentials: "same-origin"}).then(r => r.json()).then(dag => {
  for (const [name, spec] of Object.entries(dag.params || {})) field(name, spec);
  document.getElementById("submit").disabled = false;
});
form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const result = document.getElementById("result");
  // Say at once that the request is out: on a busy Airflow the answer can take long.
  result.className = "pending"; result.textContent = "Triggering…";
  let response, body;
  try {
    response = await fetch(api + "/dagRuns", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json"}, body: JSON.stringify({logical_date: null, conf: conf()})});
    const text = await response.text();
    try { body = JSON.parse(text); } catch (e) { body = {detail: response.status + " " + text.slice(0, 500)}; }
  } catch (e) {  // no answer at all: show it, never leave the page waiting silently
    result.className = "problem"; result.textContent = "the trigger request failed: " + e; return;
  }
  if (!response.ok) { result.className = "problem"; result.textContent = JSON.stringify(body.detail || body);
    return; }
  result.className = "";
  result.innerHTML = "";
  const link = document.createElement("a");
  link.id = "run-link"; link.target = "_top";
  link.href = "../dags/" + encodeURIComponent(dagId) + "/runs/" + encodeURIComponent(body.dag_run_id);
  link.textContent = body.dag_run_id; link.dataset.runId = body.dag_run_id;
  result.append("Triggered ", link, " (" + JSON.stringify(body.conf) + ")");
});
"""


@app.get("/trigger", response_class=HTMLResponse)
def trigger_page() -> HTMLResponse:
    dag_id = config.manual_dag_id()
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>Trigger {html.escape(dag_id)}</title>"
        f"<style>{_STYLE}</style></head><body data-dag='{html.escape(dag_id)}'>"
        f"<h2>Trigger <a target='_top' href='../dags/{quote(dag_id)}'>{html.escape(dag_id)}</a></h2>"
        "<p><a href='status'>← Iceberg maintenance</a></p>"
        "<form id='form'><button id='submit' type='submit' disabled>Trigger</button></form><p id='result'></p>"
        f"<script>{_TRIGGER_SCRIPT}</script></body></html>"
    )


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
