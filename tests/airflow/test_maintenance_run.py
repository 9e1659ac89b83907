"""The run lifecycle (``airflow/maintenance_run.py``) is the only one: no operator writes reports or
records runs itself, and the report it keeps is the same kind of file for every operator."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from airflow_iceberg_maint.airflow.maintenance_run import SavedReport
from airflow_iceberg_maint.errors import MaintenanceError

OPERATORS = Path(__file__).resolve().parents[2] / "src" / "airflow_iceberg_maint" / "airflow" / "operators"
#: The lifecycle's own steps: an operator that reaches one of these writes out a lifecycle of its own.
LIFECYCLE_STEPS = {
    "write_report",
    "report_uri",
    "refuse_inside_tables",
    "default_report_base",
    "record_attempt",
    "last_attempt",
    "record_history",
    "cleanup_clock",
}


def _imported_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    return names | defined


@pytest.mark.parametrize("module", sorted(p.name for p in OPERATORS.glob("*.py")))
def test_no_operator_module_writes_out_the_run_lifecycle_again(module: str) -> None:
    assert _imported_names(OPERATORS / module) & LIFECYCLE_STEPS == set()


class Staged:
    def __init__(self, body: dict[str, object]) -> None:
        self.body = body

    def to_json(self) -> dict[str, object]:
        return dict(self.body)


@pytest.mark.parametrize("keeps_failure", [True, False])
def test_the_report_is_written_when_planned_and_done_and_on_failure_only_where_it_keeps_failures(
    tmp_path: Path, keeps_failure: bool
) -> None:
    path = tmp_path / "reports" / "dag" / "run" / "db.t.json"
    saved = SavedReport(f"file://{path}", {}, keeps_failure=keeps_failure)
    saved.stage(Staged({"orphan_files": ["a"]}), "listed")
    assert not path.exists()  # only the plan is written before the run ends
    saved.stage(Staged({"orphan_files": ["a", "b"]}), "planned")
    error_field = {"error": None} if keeps_failure else {}
    assert json.loads(path.read_text()) == {"orphan_files": ["a", "b"], "stage": "planned", **error_field}

    written = saved.failed(MaintenanceError("the store went away"))
    if keeps_failure:
        assert written == f"file://{path}"
        assert json.loads(path.read_text())["error"] == "MaintenanceError: the store went away"
    else:  # an expiry's report stays as planned; the failure is in the task log and the state
        assert written is None
        assert json.loads(path.read_text()) == {"orphan_files": ["a", "b"], "stage": "planned"}

    saved.write({"orphan_files": ["a", "b"]}, "done")
    assert json.loads(path.read_text()) == {"orphan_files": ["a", "b"], "stage": "done", **error_field}
