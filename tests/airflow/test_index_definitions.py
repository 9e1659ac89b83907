"""Parsing ``iceberg_indexes.yaml``: the sample file, and each kind of bad entry refused with a message naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_iceberg_maint.airflow.table_assets import table_asset, table_of_asset_uri
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.policy.index_definitions import (
    load_index_definitions,
    parse_index_definitions,
    table_names,
)
from airflow_iceberg_maint.policy.lag_threshold import LagThreshold
from tests.support.airflow_dags import DAGS


def test_the_sample_definitions() -> None:
    [events] = load_index_definitions(DAGS / "iceberg_indexes.yaml")
    assert events.table == "demo.events"
    by_id, by_kind = events.indexes
    assert (by_id.name, by_id.ordering, by_id.with_row_location, by_id.retain_last) == (
        "events_by_id",
        ("id",),
        True,
        2,
    )
    assert by_id.threshold == LagThreshold(snapshots=0)
    assert by_kind.ordering == ("bucket(4, kind)", "kind")
    assert by_kind.threshold == LagThreshold(snapshots=2, added_files=10)
    assert (by_id.shards, by_kind.shards) == (1, 2)
    assert events.index_location is None


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"table": "a.b"}, r"expected a list of tables, got dict"),
        ([{"table": "ab", "indexes": [{"name": "i", "ordering": "id"}]}], r"'ab': expected 'namespace.table'"),
        ([{"table": "a.b", "indexes": []}], r"entry 0 \(a\.b\): 'indexes' must be a non-empty list"),
        ([{"table": "a.b", "indexes": [{"name": "i", "ordering": "id"}]}] * 2, r"entry 1: table a\.b is listed twice"),
        (
            [{"table": "a.b", "indexes": [{"name": "i", "ordering": "id"}, {"name": "i", "ordering": "x"}]}],
            r"an index name is listed twice",
        ),
        ([{"table": "a.b", "indexes": [{"name": ".i", "ordering": "id"}]}], r"index 0 \(\.i\): index name"),
        ([{"table": "a.b", "indexes": [{"name": "i"}]}], r"index 0 \(i\): 'ordering' is required"),
        (
            [{"table": "a.b", "indexes": [{"name": "i", "ordering": "id", "retain_last": 0}]}],
            r"\(i\) retain_last: expected a whole number >= 1, got 0",
        ),
        (
            [{"table": "a.b", "indexes": [{"name": "i", "ordering": "id", "with_row_location": "yes"}]}],
            r"\(i\) with_row_location: expected true or false",
        ),
        (
            [{"table": "a.b", "indexes": [{"name": "i", "ordering": "id", "lag": {"max_lag_seconds": -1}}]}],
            r"\(i\) lag: argument max_lag_seconds: expected a number >= 0",
        ),
        ([{"table": "a.b", "index": []}], r"entry 0: unknown key\(s\) index"),
        (
            [{"table": "a.b", "index_location": 5, "indexes": [{"name": "i", "ordering": "id"}]}],
            r"entry 0 \(a\.b\): 'index_location' must be a location, got 5",
        ),
    ],
)
def test_bad_definitions_are_refused_by_name(document: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_index_definitions(document, "defs.yaml")


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"index definitions .*missing\.yaml.*: cannot be read"):
        load_index_definitions(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- table: [\n")
    with pytest.raises(InvalidInputError, match=r"not valid YAML"):
        load_index_definitions(bad)


def test_table_assets_and_arguments() -> None:
    asset = table_asset("iceberg_default", "sales.eu.orders")
    assert (asset.name, asset.uri) == ("iceberg_default.sales.eu.orders", "iceberg://iceberg_default/sales/eu/orders")
    assert table_of_asset_uri(asset.uri) == "sales.eu.orders"
    assert table_of_asset_uri("s3://bucket/sales/orders") is None
    assert table_names("a.b, c.d") == ["a.b", "c.d"]
    assert table_names(["a.b"]) == ["a.b"]
    assert table_names(None) is None and table_names("None") is None
