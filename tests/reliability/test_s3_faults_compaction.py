"""Compaction (``rewrite_data_files``, S19-S21) through the fault proxy in front of the local S3 server.

Faults on the rewrite's reads (data files, manifests, metadata), its writes (the new data files, manifests
and the commit's metadata file) and its commit: each run either completes (all groups, or some with the
others reported in ``failed``), or raises a ``MaintenanceError`` with a one-line message, never a raw
botocore or pyarrow error. Whatever happened, the table reads exactly the rows it read before, every older
snapshot too, and no referenced file is missing (the oracle lists the bucket with its own client on the real
endpoint). Then a healthy rerun compacts, and a healthy orphan run removes what the faulted run left behind.
Servers, proxy and catalogs are the fixtures of ``test_s3_faults`` (moto, and SeaweedFS's S3).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from airflow_iceberg_maint import rewrite_data_files
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import SCHEMA, referenced_by_oracle, rows
from tests.reliability import figures
from tests.reliability import test_s3_faults as faults
from tests.reliability.fault_proxy import FaultProxy
from tests.reliability.test_s3_faults import Case, _always, _first_all, keys, run

pytestmark = pytest.mark.s3
# test_s3_faults' fixtures: the servers, the oracle's client on the real endpoint, the two catalogs.
server, endpoint, plain, catalogs = faults.server, faults.endpoint, faults.plain, faults.catalogs

#: Reads (data files, manifests, metadata), writes (data files, the commit's metadata file) and the commit.
OPERATIONS = ("get_data", "put_data", "get_manifest", "get_metadata", "put_metadata")
CASES = _first_all(OPERATIONS) + _always(
    [("get_data", "reset"), ("put_data", "reset"), ("put_metadata", "reset"), ("put_metadata", "drop_after")]
)
if figures.SOAK:
    CASES += _always([(op, fault) for op in OPERATIONS for fault in ("500", "slowdown", "drop_after")])
TOTALS: dict[str, int] = {"runs": 0, "completed": 0, "clear_errors": 0, "groups_failed": 0, "faults": 0, "lost": 0}


@pytest.fixture(scope="module")
def proxy(endpoint: str) -> Iterator[FaultProxy]:  # this module's totals, not test_s3_faults'
    TOTALS.update(dict.fromkeys(TOTALS, 0))  # per server
    with FaultProxy(endpoint) as running:
        yield running
    figures.report(f"s3_faults_compaction[{endpoint}]", cases=len(CASES), **TOTALS)


def _ids(table: Table) -> dict[int, list[int]]:
    return {
        s.snapshot_id: sorted(table.scan(snapshot_id=s.snapshot_id).to_arrow().column("id").to_pylist())
        for s in table.metadata.snapshots
    }


def _missing(client: Any, table: Table) -> list[str]:
    hint = f"{table.metadata.location.rstrip('/')}/metadata/version-hint.text"
    return sorted((referenced_by_oracle(table) - {hint}) - keys(client, table.metadata.location))


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_compaction_through_faults_is_exact(
    catalogs: tuple[SqlCatalog, SqlCatalog],
    plain: Any,
    proxy: FaultProxy,
    case: Case,
) -> None:
    real, faulty = catalogs
    name = f"db.c_{uuid.uuid4().hex[:8]}"
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    table = real.create_table(name, schema=SCHEMA, partition_spec=spec)
    for i in range(4):  # 24 small files, 4 in each of 6 partitions
        table.append(rows(i * 12, 12))
    before = _ids(real.load_table(name))
    current = real.load_table(name).metadata.current_snapshot_id
    assert current is not None

    table = faulty.load_table(name)  # loaded healthy: the faults hit the rewrite itself
    rules = case.make_rules()
    injected = proxy_injected(proxy)
    proxy.set_rules(rules, seed=case.seed)
    result: list[Any] = []
    try:
        outcome = run(
            lambda: result.append(rewrite_data_files(table, dry_run=False, min_input_files=2)), "compaction", TOTALS
        )
    finally:
        proxy.heal()
    injected = proxy_injected(proxy) - injected
    TOTALS["faults"] += injected
    assert injected > 0, f"{case.label}: no request met a fault"
    failed = len(result[0].failed) if result else 0
    TOTALS["groups_failed"] += failed

    table = real.load_table(name)
    lost = _missing(plain, table)
    TOTALS["lost"] += len(lost)
    assert lost == [], f"{case.label}: referenced files missing: {lost}"
    after = _ids(table)
    assert {k: after[k] for k in before} == before  # every snapshot reads what it read before
    assert all(after[k] == before[current] for k in after.keys() - before.keys())  # the rewrite's replace commits
    figures.report(f"s3_faults_compaction[{case.label}]", injected=injected, outcome=outcome, groups_failed=failed)

    # Healthy: the rerun compacts what is left, and the orphan run removes what the faulted run left behind.
    done = rewrite_data_files(real.load_table(name), dry_run=False, min_input_files=2)
    assert done.failed == []
    table = real.load_table(name)
    cleaned = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[])
    assert cleaned.failed == []
    table = real.load_table(name)
    assert _missing(plain, table) == []
    assert keys(plain, table.metadata.location) - referenced_by_oracle(table) <= {
        f"{table.metadata.location.rstrip('/')}/metadata/version-hint.text"
    }
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == before[current]


def proxy_injected(running: FaultProxy) -> int:
    return sum(running.injected.values())
