"""Every leased operator takes its lease arguments when mapped (``partial``), as when it is not.

Airflow's ``partial`` checks its keyword arguments against the ``__init__`` of the operator classes in the
MRO only; the lease's arguments (``lease_timeout``, ``lease_ttl``, ``lease_poll_interval``) are
``TableLeaseMixin``'s, so it must be an operator class itself, or a mapped leased task (each share of
``compaction_task_group``, an index commit per shard) could not be told how long to wait for its table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.definitions.mappedoperator import MappedOperator

import airflow_iceberg_maint.airflow.operators.compaction
import airflow_iceberg_maint.airflow.operators.expiry
import airflow_iceberg_maint.airflow.operators.index
import airflow_iceberg_maint.airflow.operators.orphan_shards
import airflow_iceberg_maint.airflow.operators.orphans  # noqa: F401  (every leased operator is defined)
from airflow_iceberg_maint.airflow.compaction_task_group import compaction_task_group
from airflow_iceberg_maint.airflow.leased_task import TableLeaseMixin

LEASE: dict[str, Any] = {"lease_timeout": 5.0, "lease_ttl": 30.0, "lease_poll_interval": 1.0}


def leased_operators() -> list[type[TableLeaseMixin]]:
    """Every concrete leased operator class of the package (the mixins and the tests' subclasses left out)."""
    found, todo = set(), list(TableLeaseMixin.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("airflow_iceberg_maint.airflow.operators."):
            found.add(cls)
    return sorted(found, key=lambda c: c.__name__)


def test_the_package_has_the_leased_operators_this_test_covers() -> None:
    assert {c.__name__ for c in leased_operators()} >= {
        "IcebergRewriteDataFilesOperator",
        "IcebergRewriteManifestsOperator",
        "IcebergExpireSnapshotsOperator",
        "IcebergRemoveOrphanFilesOperator",
        "IcebergFinishOrphanShardsOperator",
        "IcebergCommitIndexExtractOperator",
        "IcebergExpireIndexExtractsOperator",
    }


@pytest.mark.parametrize("operator", leased_operators(), ids=lambda c: c.__name__)
def test_a_mapped_leased_operator_takes_the_lease_arguments(operator: type[TableLeaseMixin]) -> None:
    with DAG(dag_id=f"mapped_{operator.__name__}", schedule=None, start_date=datetime(2026, 1, 1)):
        mapped = operator.partial(task_id="leased", **LEASE).expand_kwargs([{"table": "db.a"}, {"table": "db.b"}])
    assert isinstance(mapped, MappedOperator)
    assert {k: mapped.partial_kwargs[k] for k in LEASE} == LEASE


def test_the_compaction_task_groups_shares_take_the_lease_arguments() -> None:
    with DAG(dag_id="compaction_lease", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        compaction_task_group(table="db.t", shares=4, target_file_size_mb=1, **LEASE)
    rewrite = dag.get_task("rewrite_data_file_groups")
    assert isinstance(rewrite, MappedOperator)
    assert {k: rewrite.partial_kwargs[k] for k in LEASE} == LEASE
    assert not any(hasattr(dag.get_task("plan_data_rewrite"), k) for k in LEASE)  # the plan reads only: no lease
