"""Orphan removal with the S3 credentials SeaweedFS's REST catalog vends per table (``tests.vending``).

The catalog's configuration holds no S3 keys, and the process's default AWS chain is an identity the
store refuses (``OUTSIDER``): a listing or delete that succeeds used the vended credentials. The
credentials live ``LIFETIME_SECONDS``; a run that outlives them renews them by loading the table again.
"""

from __future__ import annotations

import time
from typing import Any

import botocore.exceptions
import pytest

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.errors import IncompleteMetadataError, StorageError
from airflow_iceberg_maint.fs.backends import storage_for
from airflow_iceberg_maint.fs.s3_client import S3_CLIENT
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.report import OrphanReport
from tests.orphans.catalog_cases import CatalogCase, cutoff_after_writes, older_than
from tests.orphans.scenario import SCHEMA, rows
from tests.vending import LIFETIME_SECONDS, OUTSIDER, VendedTable, VendingServer

pytestmark = pytest.mark.rest


def vended_keys(props: Any) -> tuple[str, str, str]:
    return props["s3.access-key-id"], props["s3.secret-access-key"], props["s3.session-token"]


@pytest.fixture
def outsider_default_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default AWS chain of this process and its children is the refused identity."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", OUTSIDER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", OUTSIDER[1])
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def vended(vending_seaweed: VendingServer, outsider_default_chain: None) -> VendedTable:
    return VendedTable(vending_seaweed)


def test_the_static_identity_is_refused_and_the_vended_one_allowed(vended: VendedTable) -> None:
    props = vended.catalog.load_table("db.t").io.properties
    assert not {"s3.access-key-id", "s3.secret-access-key"} & vended.config.keys()
    assert props["s3.access-key-id"].startswith("ASIA") and int(props["s3.session-token-expires-at-ms"]) > 0
    assert vended.refusal(*OUTSIDER) == "AccessDenied"
    assert vended.refusal(*vended_keys(props)) is None
    # Scoped to the table: its namespace's folder cannot be listed with them.
    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        vended.server.client("s3", *vended_keys(props)).list_objects_v2(Bucket=vended.bucket, Prefix="db/")


def test_the_command_line_lists_and_deletes_with_vended_credentials(vended: VendedTable) -> None:
    case = CatalogCase("rest", vended.catalog, "vend", vended.config)
    cutoff = cutoff_after_writes()
    before = vended.keys()
    # One real run (a dry run lists the same way): each command imports Airflow, seconds apiece.
    real = case.orphans("db.t", *older_than(cutoff))
    assert sorted(real["orphan_files"]) == sorted(vended.orphans)
    assert (real["deleted_file_count"], real["failed"]) == (2, [])
    assert vended.keys() == before - vended.orphans
    assert vended.catalog.load_table("db.t").scan().to_arrow().num_rows == 10


def _wait_until_refused(vended: VendedTable, keys: tuple[str, str, str]) -> float:
    """Wait until the store refuses ``keys`` (their lifetime ended); the seconds waited."""
    start = time.monotonic()
    while (code := vended.refusal(*keys)) is None:
        assert time.monotonic() - start < LIFETIME_SECONDS + 10, "the vended credentials did not expire"
        time.sleep(0.2)
    assert code in ("InvalidAccessKeyId", "ExpiredToken", "AccessDenied"), code
    return time.monotonic() - start


def test_a_run_longer_than_the_credentials_lifetime_renews_them(vended: VendedTable) -> None:
    cutoff = cutoff_after_writes()
    table = load_table(vended.catalog, "db.t")
    loaded = dict(table.io.properties)  # the run reloads the table before deleting, replacing table.io
    first = vended_keys(loaded)
    before = vended.keys()
    waited: list[float] = []

    def outlive_the_credentials(report: OrphanReport, stage: str) -> None:
        # Listed and matched with the first credentials; the deletes come after they ended.
        if stage == "matched":
            assert report.orphan_files and vended.refusal(*first) is None
            waited.append(_wait_until_refused(vended, first))

    report = remove_orphan_files(
        table, OrphanOptions(older_than=cutoff), sources=[INDEX_FILES], on_stage=outlive_the_credentials
    )
    assert len(waited) == 1
    assert sorted(report.orphan_files) == sorted(vended.orphans)
    assert (report.deleted_file_count, report.failed) == (2, [])
    assert vended.keys() == before - vended.orphans
    # The run reloaded the table before deleting: table.io has the keys of that load.
    assert table.io.properties["s3.access-key-id"] != first[0]

    # A storage built later from the loaded (ended) properties renews too.
    root = table.location()
    listed = {f.path for f in storage_for(root, loaded).list_files(root, lambda _: True)}
    assert listed == before - vended.orphans
    # The FileIO's pyarrow filesystem does not renew: with the ended credentials it is refused.
    with pytest.raises(StorageError, match=r"cannot be listed.*INVALID_ACCESS_KEY_ID"):
        list(storage_for(root, {**loaded, S3_CLIENT: "file-io"}).list_files(root, lambda _: True))


def test_a_nested_tables_metadata_file_is_refused_to_every_identity_its_own_included(vended: VendedTable) -> None:
    """Issue 31, finding 9: the loader reads a table's metadata file with the table's own configuration
    from the load response (pyiceberg builds ``table.io`` from the catalog's properties, then the
    table's ``config`` and ``storage-credentials`` over them), here its vended keys. SeaweedFS refuses
    the read of a ``*.metadata.json`` below another table's ``data/`` folder to every identity: its
    table-bucket layout check runs on GET and HEAD too, and below ``data/`` it admits only data file
    names (``.parquet``, ``.orc``, ``.avro``, ``.lance``). No choice of credentials can read it."""
    outer = vended.catalog.load_table("db.t")
    inner = vended.catalog.create_table("db.inner", schema=SCHEMA, location=f"{outer.location()}/data/inner")
    inner.append(rows(0, 4))
    loaded = vended.catalog.load_table("db.inner")
    props = loaded.io.properties
    assert props["s3.access-key-id"] == loaded.config["s3.access-key-id"]  # the table's own keys
    assert props["s3.access-key-id"].startswith("ASIA")
    own = vended.server.client("s3", *vended_keys(props))
    key = loaded.metadata_location.removeprefix(f"s3://{vended.bucket}/")
    manifest_list = loaded.current_snapshot().manifest_list.removeprefix(f"s3://{vended.bucket}/")
    assert own.get_object(Bucket=vended.bucket, Key=manifest_list)["Body"].read()  # an .avro beside it reads
    for client in (own, vended.admin):
        with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
            client.get_object(Bucket=vended.bucket, Key=key)
    with pytest.raises(IncompleteMetadataError, match="ACCESS_DENIED"):
        load_table(vended.catalog, "db.inner")
    # The outer table's metadata file, in its own metadata/ folder, reads with its own keys.
    outer_keys = vended_keys(vended.catalog.load_table("db.t").io.properties)
    outer_key = outer.metadata_location.removeprefix(f"s3://{vended.bucket}/")
    assert vended.server.client("s3", *outer_keys).get_object(Bucket=vended.bucket, Key=outer_key)["Body"].read()
