"""Issue 21, cases 1 to 3: another table's live files under the scan location, spelled as its writer spells them.

Each case is one fixed draw of the property in ``tests/reliability/test_other_tables_property.py``
(the same planting and the same exact oracle), so that each case runs on its store in every
``make test``, whatever the property's random draws are.
"""

from __future__ import annotations

from collections import Counter

import pytest
from pyiceberg.table.locations import LocationProvider

from tests.reliability.test_other_tables_property import STORES, check


class Anywhere(LocationProvider):
    """A location provider of a user's own: it may put files wherever it likes."""

    def new_data_location(self, data_file_name: str, partition_key: object = None) -> str:
        return f"/tmp/anywhere/{data_file_name}"


CASES = [
    # 1: the older name of write.data.path, honoured by Iceberg Java's location providers and iceberg-rust.
    ("local", "write.folder-storage.path", [], 0),
    ("s3", "write.folder-storage.path", [], 0),
    # 2: S3 keeps "//" in keys, as Java's S3FileIO writes them.
    ("s3", "write.data.path", ["double_slash"], 0),
    ("gcs", "write.data.path", ["double_slash"], 0),
    # 3: scheme aliases and host spellings of the same bucket or container.
    ("gcs", "write.data.path", ["scheme_alias"], 0),
    ("azure", "write.data.path", ["blob_host"], 0),
    ("azure", "write.data.path", ["scheme_alias"], 2),  # wasbs
    ("azure", "write.data.path", ["host_case"], 0),
    ("s3", "location", ["scheme_alias", "host_case"], 0),
    ("local", "write.data.path", ["dot_segment", "percent"], 0),
]


@pytest.mark.parametrize(
    ("store", "prop", "spellings", "alias"),
    [pytest.param(*case, marks=[getattr(pytest.mark, case[0])] if case[0] != "local" else []) for case in CASES],
)
@pytest.mark.parametrize("sharded", [False, True])
def test_another_tables_files_are_kept(request, store, prop, spellings, alias, sharded):
    catalog = request.getfixturevalue(STORES[store])
    draw = {"ops": ["append", "delete"], "property": prop, "spellings": spellings, "alias": alias, "sharded": sharded}
    figures: Counter[str] = Counter()
    check(catalog, store, draw, figures)
    assert figures["examples"] == 1


def test_every_location_property_of_another_table_counts(sqlite_catalog):
    from airflow_iceberg_maint.reachability.other_tables import TablePaths
    from tests.orphans.scenario import SCHEMA

    props = {
        "write.data.path": "file:///w/d",
        "write.object-storage.path": "file:///w/o",
        "write.folder-storage.path": "file:///w/f/",
        "write.metadata.path": "file:///w/m",
    }
    table = sqlite_catalog.create_table("db.props", schema=SCHEMA, properties=props)
    location = table.location().rstrip("/")
    paths = TablePaths.of("db.props", table.metadata)
    assert paths.paths == (
        location,
        f"{location}/data",
        f"{location}/metadata",
        "file:///w/d",
        "file:///w/o",
        "file:///w/f",
        "file:///w/m",
    )
    assert paths.provider is None
    assert TablePaths.from_json(paths.to_json()) == paths


@pytest.mark.parametrize("provider", ["write.location-provider.impl", "write.py-location-provider.impl"])
def test_another_table_with_its_own_location_provider_stops_the_run(sqlite_catalog, provider):
    from pathlib import Path

    from airflow_iceberg_maint.errors import UnknownLocationsError
    from airflow_iceberg_maint.fs.locations import local_path
    from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
    from airflow_iceberg_maint.orphans.options import OrphanOptions
    from airflow_iceberg_maint.orphans.removal import remove_orphan_files
    from tests.orphans.scenario import SCHEMA, rows

    table = sqlite_catalog.create_table("db.a", schema=SCHEMA)
    table.append(rows(0, 3))
    other = sqlite_catalog.create_table("db.custom", schema=SCHEMA)
    with other.transaction() as tx:
        tx.set_properties({provider: f"{__name__}.Anywhere"})
    orphan = Path(local_path(f"{table.location()}/data/orphan.parquet"))
    orphan.write_bytes(b"x")
    with pytest.raises(UnknownLocationsError, match=r"table db.custom: writes through its own location provider"):
        remove_orphan_files(table, OrphanOptions(older_than_days=0), sources=[INDEX_FILES])
    assert orphan.exists()
    only = remove_orphan_files(table, OrphanOptions(older_than_days=0, only_this_table=True), sources=[INDEX_FILES])
    assert only.orphan_files == [f"{table.location()}/data/orphan.parquet"]
