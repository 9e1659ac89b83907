"""Orphan runs, index refresh and expire through a real TCP proxy that injects S3 faults (issue 9, part 2).

For each S3 operation (listing, DeleteObjects, conditional PUTs, GETs of manifests and of
metadata) and each fault (connection reset, 500, 503, SlowDown, reply dropped after the request
took effect), a table on the real S3-protocol server is maintained through the proxy: each run
either completes or fails with a ``MaintenanceError`` (never a raw botocore or pyarrow error).
After every run an independent oracle (pyiceberg's inspect tables and metadata log, and the
index metadata, tracking and region files read with a plain boto3 client on the real endpoint)
checks that every live file still exists; then the same runs on the healthy endpoint complete,
the planted orphans are gone, every snapshot reads, and index lookups are exact.

Every case runs on two servers: moto's, and SeaweedFS's S3 (a plain bucket), a second real
implementation of the protocol. Bounded by default (10 cases): each fault on the first matching
request of every operation at once, then persistent resets of listing, conditional PUTs and
GETs, and persistent dropped replies to DeleteObjects; clients use botocore's standard retry mode with 3 attempts
(``AWS_RETRY_MODE``, ``AWS_MAX_ATTEMPTS``), as the adaptive mode's rate limiter waits seconds
after each SlowDown. ``ICEBERG_MAINT_SOAK=1`` keeps the library's own retry settings (adaptive,
9 attempts), faults the first two matches, and adds every (operation, fault) pair with
probability 0.3 and 1.0 under three seeds.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.errors import MaintenanceError
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.spec import DELETE_AFTER_COMMIT, PREVIOUS_VERSIONS_MAX
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.index.write.refresh import refresh_full
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from tests.orphans.scenario import referenced_by_oracle, snapshot_row_counts
from tests.reliability import figures, oracle
from tests.reliability.fault_proxy import FAULTS, FaultProxy, Rule
from tests.support.services import S3_PROPS, seaweed_s3_properties

pytestmark = pytest.mark.s3

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
INDEX = "by_id"
FIRST = figures.scale(1, 2)  # faulted leading requests per operation: fewer than the client's attempts


@dataclass(frozen=True)
class Case:
    label: str
    rules: tuple[tuple[str, str, float, int | None], ...]  # (operation, fault, probability, first N)
    seed: int = 0

    def make_rules(self) -> list[Rule]:
        return [Rule(op, fault, probability, first) for op, fault, probability, first in self.rules]


#: What orphan runs and index maintenance send; what snapshot expiry sends (it lists nothing, writes no index
#: file, and commits through pyiceberg's FileIO, which writes the metadata file with a plain PUT).
MAINTENANCE_OPERATIONS = ("list", "delete_objects", "conditional_put", "get_manifest", "get_metadata")
EXPIRY_OPERATIONS = ("delete_objects", "get_manifest", "get_metadata", "put_metadata")


def _first_all(operations: tuple[str, ...]) -> list[Case]:
    """Each fault on the first request(s) of every operation at once."""
    return [Case(f"{fault}-first{FIRST}-all", tuple((op, fault, 1.0, FIRST) for op in operations)) for fault in FAULTS]


def _always(pairs: list[tuple[str, str]]) -> list[Case]:
    return [Case(f"{op}-{fault}-always", ((op, fault, 1.0, None),)) for op, fault in pairs]


def _every_pair(operations: tuple[str, ...]) -> list[Case]:
    """Every (operation, fault) pair at probability 0.3 and 1.0 (the soak size)."""
    return [
        Case(f"{op}-{fault}-p{p}-s{seed}", ((op, fault, p, None),), seed)
        for op in operations
        for fault in FAULTS
        for p, seed in ((0.3, 0), (1.0, 1))
    ]


def _cases() -> list[Case]:
    # Bounded: each fault on the first request(s) of every operation at once, then persistent faults per operation.
    resets = [(op, "reset") for op in ("list", "conditional_put", "get_manifest", "get_metadata")]
    cases = _first_all(MAINTENANCE_OPERATIONS) + _always([*resets, ("delete_objects", "drop_after")])
    if figures.SOAK:
        cases += _always([("delete_objects", "reset"), ("conditional_put", "drop_after")])
        cases += _every_pair(MAINTENANCE_OPERATIONS)
    return cases


def _expiry_cases() -> list[Case]:
    # Bounded (4 cases, a persistent fault costs the clients' retries): resets of the first request of every
    # operation, persistent resets of manifest reads, of the commit's metadata write, and of every delete
    # (DeleteObjects and the one-key DELETEs it falls back to: deletes fail per file). Soak: every fault first,
    # persistent resets and dropped replies of each operation, and every (operation, fault) pair.
    first = _first_all(EXPIRY_OPERATIONS)
    both = (("delete_objects", "reset", 1.0, None), ("delete_object", "reset", 1.0, None))
    if not figures.SOAK:
        resets = _always([("get_manifest", "reset"), ("put_metadata", "reset")])
        return [first[0], *resets, Case("deletes-reset-always", both)]
    drops = [("delete_objects", "drop_after"), ("put_metadata", "drop_after")]
    always = _always([*((op, "reset") for op in EXPIRY_OPERATIONS), *drops])
    return [*first, *always, Case("deletes-reset-always", both), *_every_pair(EXPIRY_OPERATIONS)]


CASES = _cases()
EXPIRY_CASES = _expiry_cases()
TOTALS: dict[str, int] = {"runs": 0, "completed": 0, "clear_errors": 0, "faults": 0, "lost": 0}


def rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids])})


@pytest.fixture(scope="module", params=["moto", pytest.param("seaweedfs", marks=pytest.mark.rest)])
def server(request: pytest.FixtureRequest) -> dict[str, str]:
    """The S3 server's s3.* properties: moto's, and SeaweedFS's (a plain bucket) as a second real implementation."""
    if request.param == "seaweedfs":
        return seaweed_s3_properties()
    value = os.environ.get("TEST_S3_ENDPOINT")
    if not value:
        if os.environ.get("CI"):
            pytest.fail("TEST_S3_ENDPOINT is not set: run the tests through 'make test'")
        pytest.skip("TEST_S3_ENDPOINT is not set: run the tests through 'make test'")
    return {"s3.endpoint": value, **S3_PROPS}


@pytest.fixture(scope="module")
def endpoint(server: dict[str, str]) -> str:
    return server["s3.endpoint"]


@pytest.fixture(scope="module")
def plain(server: dict[str, str]) -> Any:
    """The oracle's own client, on the real endpoint."""
    return boto3.client(
        "s3",
        endpoint_url=server["s3.endpoint"],
        aws_access_key_id=server["s3.access-key-id"],
        aws_secret_access_key=server["s3.secret-access-key"],
        region_name=server["s3.region"],
    )


@pytest.fixture(scope="module")
def proxy(endpoint: str) -> Iterator[FaultProxy]:
    TOTALS.update(dict.fromkeys(TOTALS, 0))  # per server
    with FaultProxy(endpoint) as running:
        yield running
    figures.report(f"test_s3_faults[{endpoint}]", cases=len(CASES), **TOTALS)


@pytest.fixture(scope="module")
def catalogs(
    tmp_path_factory: pytest.TempPathFactory, server: dict[str, str], plain: Any, proxy: FaultProxy
) -> Iterator[tuple[SqlCatalog, SqlCatalog]]:
    """One catalog database, seen through the real endpoint and through the proxy."""
    with pytest.MonkeyPatch.context() as patch:
        if not figures.SOAK:
            patch.setenv("AWS_RETRY_MODE", "standard")
            patch.setenv("AWS_MAX_ATTEMPTS", "3")
        bucket = f"faults-{uuid.uuid4().hex[:12]}"
        plain.create_bucket(Bucket=bucket)
        uri = f"sqlite:///{tmp_path_factory.mktemp('faults')}/catalog.db"
        props = {**server, "warehouse": f"s3://{bucket}/wh"}
        real = SqlCatalog("default", uri=uri, **props)
        real.create_namespace("db")
        yield real, SqlCatalog("default", uri=uri, **{**props, "s3.endpoint": proxy.url})


@pytest.fixture(scope="module")
def shared_table(catalogs: tuple[SqlCatalog, SqlCatalog], plain: Any) -> str:
    """One table for every case (each case appends to it): preparing a table per case costs seconds."""
    return prepare(catalogs[0])


def keys(plain: Any, location: str) -> set[str]:
    uri = Uri.parse(location.rstrip("/") + "/")
    pages = plain.get_paginator("list_objects_v2").paginate(Bucket=uri.authority, Prefix=uri.path.lstrip("/"))
    return {f"s3://{uri.authority}/{o['Key']}" for page in pages for o in page.get("Contents", [])}


def read(plain: Any, location: str) -> bytes:
    uri = Uri.parse(location)
    body: bytes = plain.get_object(Bucket=uri.authority, Key=uri.path.lstrip("/"))["Body"].read()
    return body


def _absolute(path: str, base: str) -> str:
    return path if "://" in path else f"{base.rstrip('/')}/{path}"


def index_live(plain: Any, table_location: str) -> set[str]:
    """Numbered metadata files, the newest one's log, and every extract's tracking and region files."""
    meta_dir = f"{table_location.rstrip('/')}/index/{INDEX}/metadata"
    versions = sorted(k for k in keys(plain, meta_dir) if k.endswith(".metadata.json"))
    newest = json.loads(read(plain, versions[-1]))
    live = set(versions) | {e["metadata-file"] for e in newest.get("metadata-log", [])}
    for extract in newest.get("extracts", []):
        tracking = _absolute(extract["tracking-file"], newest["location"])
        live.add(tracking)
        paths = pq.read_table(io.BytesIO(read(plain, tracking)), columns=["file_path"]).column("file_path")
        live.update(_absolute(p, newest["location"]) for p in paths.to_pylist())
    return live


def live_files(plain: Any, table: Table) -> set[str]:
    hint = f"{table.metadata.location.rstrip('/')}/metadata/version-hint.text"
    return (referenced_by_oracle(table) - {hint}) | index_live(plain, table.metadata.location)


def assert_nothing_live_lost(plain: Any, real: SqlCatalog, name: str, what: str) -> None:
    table = real.load_table(name)
    gone = sorted(live_files(plain, table) - keys(plain, table.metadata.location))
    TOTALS["lost"] += len(gone)
    assert gone == [], f"{what}: live files lost: {gone}"


def assert_lookups_exact(table: Table) -> None:
    everything = table.scan().to_arrow()
    for value in (0, 45, 10_000):
        result = lookup(table, INDEX, [(value,)])
        assert result.mode == "index", (value, result.mode)
        expected = everything.filter(pc.equal(everything["id"], value)).sort_by("name").to_pylist()
        assert result.rows.sort_by("name").to_pylist() == expected, value


def prepare(real: SqlCatalog) -> str:
    """A table with two extracts (delete-after-commit on)."""
    name = f"db.t_{uuid.uuid4().hex[:8]}"
    table = real.create_table(name, SCHEMA)
    table.append(rows(0, 30))
    props = {DELETE_AFTER_COMMIT: "true", PREVIOUS_VERSIONS_MAX: "2"}
    IndexStore(table).create(new_index_metadata(table, INDEX, ["bucket(4, id)", "id"], [], True, props), INDEX)
    refresh_full(table, INDEX)
    table.append(rows(30, 30))
    refresh_full(table, INDEX)
    return name


def plant(real: SqlCatalog, plain: Any, name: str) -> set[str]:
    """A newer snapshot for the refresh, and planted orphans (data, metadata, index) for the orphan run."""
    table = real.load_table(name)
    start = int(table.current_snapshot().summary["total-records"])
    table.append(rows(start, 10))
    location = table.metadata.location.rstrip("/")
    tag = uuid.uuid4().hex[:6]
    planted = {f"{location}/data/orphan-{tag}-{i}.parquet" for i in range(3)}
    planted |= {f"{location}/metadata/orphan-{tag}.avro", f"{location}/index/{INDEX}/regions-orphan-{tag}.parquet"}
    for path in planted:
        uri = Uri.parse(path)
        plain.put_object(Bucket=uri.authority, Key=uri.path.lstrip("/"), Body=b"planted")
    return planted


def run(action: Callable[[], Any], what: str, totals: dict[str, int] = TOTALS) -> str:
    """Run one maintenance action: 'completed', or the name of the MaintenanceError it raised."""
    totals["runs"] += 1
    try:
        action()
    except MaintenanceError as exc:
        assert str(exc) and "\n" not in str(exc).strip()[:200], f"{what}: unclear error {exc!r}"
        totals["clear_errors"] += 1
        return type(exc).__name__
    totals["completed"] += 1
    return "completed"


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_maintenance_through_faults_loses_no_live_file(
    catalogs: tuple[SqlCatalog, SqlCatalog], shared_table: str, plain: Any, proxy: FaultProxy, case: Case
) -> None:
    real, faulty = catalogs
    name = shared_table
    planted = plant(real, plain, name)
    counts = snapshot_row_counts(real.load_table(name))
    rules = case.make_rules()

    outcomes: dict[str, str] = {}
    actions: dict[str, Callable[[Table], Any]] = {
        "orphans": lambda t: remove_orphan_files(t, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES]),
        "refresh": lambda t: refresh_index(t, INDEX),
        "expire": lambda t: expire_extracts(t, INDEX, retain_last=1, older_than=None),
    }
    injected = 0
    for what, action in actions.items():
        table = faulty.load_table(name)  # loaded healthy: the faults hit the maintenance run itself
        for rule in rules:
            rule.fired = 0
        before = sum(proxy.injected.values())
        proxy.set_rules(rules, seed=case.seed)
        try:
            outcomes[what] = run(lambda: action(table), what)  # noqa: B023 - called at once
        finally:
            proxy.heal()
        injected += sum(proxy.injected.values()) - before
        assert_nothing_live_lost(plain, real, name, f"{what} through {case.label}")
    TOTALS["faults"] += injected
    assert injected > 0 or any(p < 1.0 for _, _, p, _ in case.rules), f"{case.label}: no request met a fault"
    figures.report(f"test_s3_faults[{case.label}]", injected=injected, **{k: v for k, v in outcomes.items()})

    # The same runs on the healthy endpoint complete, and everything live is still there.
    table = real.load_table(name)
    refresh_index(table, INDEX)
    expire_extracts(table, INDEX, retain_last=1, older_than=None)
    report = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert report.failed == [], outcomes
    assert_nothing_live_lost(plain, real, name, "healthy rerun")
    assert not planted & keys(plain, table.metadata.location), outcomes
    table = real.load_table(name)
    assert snapshot_row_counts(table) == counts
    assert_lookups_exact(table)


EXPIRY_TOTALS: dict[str, int] = {}


@pytest.fixture(scope="module")
def expiry_table(catalogs: tuple[SqlCatalog, SqlCatalog], endpoint: str) -> Iterator[str]:
    """A table of its own for the snapshot expiry cases (each case grows it first), with an index (S13)."""
    EXPIRY_TOTALS.clear()
    EXPIRY_TOTALS.update(runs=0, completed=0, clear_errors=0, faults=0, deleted=0, failed_deletes=0, lost=0)
    yield prepare(catalogs[0])
    figures.report(f"test_s3_faults_snapshot_expiry[{endpoint}]", cases=len(EXPIRY_CASES), **EXPIRY_TOTALS)


def grow(real: SqlCatalog, name: str) -> None:
    """Two appends, then an overwrite of every older row: the older data files stay only in older snapshots."""
    table = real.load_table(name)
    base = max(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()) + 1
    table.append(rows(base, 10))
    table.append(rows(base + 10, 10))
    table.overwrite(rows(base + 20, 5), overwrite_filter=f"id < {base}")


@pytest.mark.parametrize("case", EXPIRY_CASES, ids=[c.label for c in EXPIRY_CASES])
def test_snapshot_expiry_through_faults_loses_no_live_file(
    catalogs: tuple[SqlCatalog, SqlCatalog], expiry_table: str, plain: Any, proxy: FaultProxy, case: Case
) -> None:
    """``expire_snapshots`` (older than now, retain 1) with faults on its reads, its commit and its deletes.

    It completes or fails with a ``MaintenanceError``. A failure before the commit changed nothing. After
    the commit every kept snapshot reads the same ids, nothing live is lost, a complete run deleted or
    reported as failed (per file: the CLI's exit status 3) exactly the files only the expired snapshots
    reached, and whatever of those is left is exactly what the next orphan run (healthy) removes.
    """
    real, faulty = catalogs
    name = expiry_table
    grow(real, name)
    table = real.load_table(name)
    location, loc = table.metadata_location, table.metadata.location.rstrip("/")
    ids_before = oracle.snapshot_ids(table)
    live_before, listing_before = live_files(plain, table), keys(plain, loc)
    stale = listing_before - live_before  # metadata files earlier commits dropped from the log, and index leftovers

    reports: list[Any] = []
    target = faulty.load_table(name)  # loaded healthy: the faults hit the expiry itself
    for rule in (rules := case.make_rules()):
        rule.fired = 0
    before = sum(proxy.injected.values())
    proxy.set_rules(rules, seed=case.seed)
    try:
        options = ExpireOptions(older_than=datetime.now(UTC), retain_last=1)
        outcome = run(
            lambda: reports.append(expire_snapshots(target, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS])),
            "snapshot expiry",
            EXPIRY_TOTALS,
        )
    finally:
        proxy.heal()
    injected = sum(proxy.injected.values()) - before
    EXPIRY_TOTALS["faults"] += injected
    EXPIRY_TOTALS[f"outcome_{outcome}"] = EXPIRY_TOTALS.get(f"outcome_{outcome}", 0) + 1
    assert injected > 0 or any(p < 1.0 for _, _, p, _ in case.rules), f"{case.label}: no request met a fault"

    table = real.load_table(name)
    live, listing = live_files(plain, table), keys(plain, loc)
    gone_live = sorted(live - listing)
    EXPIRY_TOTALS["lost"] += len(gone_live)
    assert gone_live == [], f"{case.label}: live files lost: {gone_live}"
    only_expired: set[str] = set()
    if table.metadata_location == location:  # failed before the commit: nothing changed
        assert outcome != "completed" or not reports[0].expired_snapshot_ids, (case.label, outcome)
        assert {x.snapshot_id for x in table.metadata.snapshots} == set(ids_before)
        assert listing >= listing_before, f"{case.label}: a file was deleted without a commit"
        assert all(p.startswith(f"{loc}/metadata/") and p.endswith(".metadata.json") for p in listing - listing_before)
    else:
        kept = {x.snapshot_id for x in table.metadata.snapshots}
        assert oracle.snapshot_ids(table) == {k: v for k, v in ids_before.items() if k in kept}
        only_expired = live_before - live
        planned = {p for p in only_expired if not p.endswith(".metadata.json")}
        assert listing - live <= only_expired | stale, f"{case.label}: a leftover no expired snapshot alone reached"
        if reports:
            report = reports[0]
            failed = {f["path"] for f in report.failed}
            assert all(f["error"] for f in report.failed), report.failed
            assert set(report.deleted_files) | failed == planned and not set(report.deleted_files) & failed
            assert not set(report.deleted_files) & listing, f"{case.label}: reported deleted, still there"
            EXPIRY_TOTALS["deleted"] += len(report.deleted_files)
            EXPIRY_TOTALS["failed_deletes"] += len(failed)
            if failed:
                EXPIRY_TOTALS["runs_exit_3"] = EXPIRY_TOTALS.get("runs_exit_3", 0) + 1
    figures.report(f"test_s3_faults_snapshot_expiry[{case.label}]", injected=injected, outcome=outcome)

    # The next orphan run (healthy) removes exactly the oracle's orphans: failed deletes among them.
    expected = listing - live
    done = remove_orphan_files(table, OrphanOptions(older_than=datetime.now(UTC)), sources=[INDEX_FILES])
    assert sorted(done.orphan_files) == sorted(expected) and done.failed == [], case.label
    after = keys(plain, loc)
    assert not (only_expired | stale) & after and live <= after
