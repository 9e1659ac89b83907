"""What the kill -9 tests run in a child (orphan run, index refresh and expire, snapshot expiry), and its launcher.

Children are forked from a ``forkserver`` that has already imported pyiceberg, pyarrow and the
engine, so one costs milliseconds instead of the 1-2 s start-up of a fresh interpreter, and
the test can afford many seeds. Each child runs the real library call (the same one the CLI
makes) and writes its JSON result to ``result_path`` when, and only when, it finished.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.api.compaction import rewrite_data_files
from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.state.lease_fence import held
from airflow_iceberg_maint.state.leases import DEFAULT_TTL_SECONDS, take
from airflow_iceberg_maint.state.sql_leases import SqlLeases

PRELOAD = [__name__, "airflow_iceberg_maint.reachability.manifest_pool", "pyiceberg.io.pyarrow"]


def _table(catalog_uri: str, warehouse: str, name: str) -> Any:
    return SqlCatalog("default", uri=catalog_uri, warehouse=warehouse).load_table(name)


def _finish(result_path: str, result: dict[str, Any]) -> None:
    temporary = f"{result_path}.tmp"
    with open(temporary, "w") as fh:
        json.dump(result, fh, default=str)
    os.replace(temporary, result_path)


@contextmanager
def leased(state_url: str, name: str) -> Iterator[None]:
    """Hold the table's lease as ``iceberg-maint`` does (default ttl; a held lease fails at once): a run killed
    with -9 leaves it held, and the next run, started at once, must take it over (issue 31, finding 8)."""
    store, ttl = SqlLeases(state_url), timedelta(seconds=DEFAULT_TTL_SECONDS)
    log = logging.getLogger(__name__)
    with held(store, take(store, name, f"kill9 run (pid {os.getpid()})", ttl, 0, log), ttl, log):
        yield


def leased_orphan_run(state_url: str, catalog_uri: str, warehouse: str, name: str, older: str, result: str) -> None:
    with leased(state_url, name):
        orphan_run(catalog_uri, warehouse, name, older, result)


def leased_index_refresh(state_url: str, catalog_uri: str, warehouse: str, name: str, index: str, result: str) -> None:
    with leased(state_url, name):
        index_refresh(catalog_uri, warehouse, name, index, result)


def digest_cache(warehouse: str) -> str:
    """The digest cache beside a local warehouse, as ``iceberg-maint`` keeps one by default (S22): shared by
    every run of a test, so later runs read through digests earlier (and killed) runs wrote."""
    return f"{local_path(warehouse)}-digests"


def orphan_run(catalog_uri: str, warehouse: str, name: str, older_than_iso: str, result_path: str) -> None:
    table = _table(catalog_uri, warehouse, name)
    older_than = datetime.fromisoformat(older_than_iso).astimezone(UTC)
    options = OrphanOptions(older_than=older_than, cache=digest_cache(warehouse))
    _finish(result_path, remove_orphan_files(table, options, sources=[INDEX_FILES]).to_json())


def index_refresh(catalog_uri: str, warehouse: str, name: str, index: str, result_path: str) -> None:
    _finish(result_path, refresh_index(_table(catalog_uri, warehouse, name), index).to_json())


def index_expire(catalog_uri: str, warehouse: str, name: str, index: str, retain_last: int, result_path: str) -> None:
    table = _table(catalog_uri, warehouse, name)
    _finish(result_path, expire_extracts(table, index, retain_last=retain_last, older_than=None))


def snapshot_expiry(
    catalog_uri: str, warehouse: str, name: str, older_than_iso: str, retain_last: int, result_path: str
) -> None:
    """The call ``iceberg-maint expire-snapshots`` makes, with the same reference sources and pins."""
    table = _table(catalog_uri, warehouse, name)
    options = ExpireOptions(
        older_than=datetime.fromisoformat(older_than_iso), retain_last=retain_last, cache=digest_cache(warehouse)
    )
    report = expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS])
    _finish(result_path, report.to_json())


def compaction(catalog_uri: str, warehouse: str, name: str, result_path: str) -> None:
    """The call ``iceberg-maint rewrite-data-files`` makes (small groups allowed, so every seed has work)."""
    report = rewrite_data_files(_table(catalog_uri, warehouse, name), dry_run=False, min_input_files=2)
    _finish(result_path, report.to_json())


def context() -> Any:
    """The forkserver context, its server preloaded with the engine (set before it first starts)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
