"""Where the Airflow tests' DAGs are, and the orphan-removal operator they build (tests/airflow/conftest.py
sets Airflow up around them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


#: The test-only DAGs (a bundle of their own, tests/airflow/conftest.py).
TEST_DAGS = REPO / "tests" / "airflow" / "dags"


def remover(state_url: str, tmp_path: Path, **kwargs: Any) -> Any:
    """An ``IcebergRemoveOrphanFilesOperator`` with its state and reports in the test's folder."""
    from airflow_iceberg_maint.airflow.operators.orphans import IcebergRemoveOrphanFilesOperator

    return IcebergRemoveOrphanFilesOperator(
        task_id="remove", state_url=state_url, report_location=f"file://{tmp_path}/reports", **kwargs
    )
