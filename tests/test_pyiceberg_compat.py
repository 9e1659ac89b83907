"""Each door of ``pyiceberg_compat`` on real pyiceberg tables and files.

These are the calls that break first when pyiceberg changes its internals;
``make test-newest-pyiceberg`` runs them (with tests/orphans and tests/index) against the newest
pyiceberg release.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import EqualTo
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.manifest import DataFileContent
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest, Table, TableIdentifier
from pyiceberg.table.update import SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.pyiceberg_compat import (
    AVRO_CODECS,
    bounds_may_match,
    current_metadata_requirement,
    missing_column_values,
    project_batch,
    read_position_deletes,
    validates_requirements_in_process,
)
from tests.index.row_deletes import commit_position_deletes

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def _table(catalog: SqlCatalog) -> Table:
    table = catalog.create_table("db.t", SCHEMA, properties={"format-version": "2"})
    table.append(pa.table({"id": pa.array(range(0, 10), pa.int64()), "name": [f"a{i}" for i in range(10)]}))
    table.append(pa.table({"id": pa.array(range(100, 110), pa.int64()), "name": [f"b{i}" for i in range(10)]}))
    return catalog.load_table("db.t")


def _data_files(table: Table) -> list:
    return sorted((task.file for task in table.scan().plan_files()), key=lambda f: f.lower_bounds[1])


def test_bounds_may_match_prunes_by_column_bounds(sqlite_catalog: SqlCatalog) -> None:
    table = _table(sqlite_catalog)
    low, high = _data_files(table)
    may_match = bounds_may_match(table.schema(), EqualTo("id", 105))  # type: ignore[arg-type, call-arg]
    assert (may_match(low), may_match(high)) == (False, True)


def test_project_batch_renames_and_fills_a_column_the_file_lacks(sqlite_catalog: SqlCatalog) -> None:
    table = _table(sqlite_catalog)
    with table.update_schema() as update:
        update.rename_column("name", "label")
        update.add_column("note", StringType())
    table = sqlite_catalog.load_table("db.t")
    data_file = _data_files(table)[0]
    parquet = pq.ParquetFile(local_path(data_file.file_path))
    file_schema = pyarrow_to_schema(parquet.schema_arrow)
    missing = missing_column_values(
        data_file, table.schema(), table.schema(), table.spec(), {f.field_id for f in file_schema.fields}
    )
    batch = parquet.read().to_batches()[0]

    projected = project_batch(
        table.schema(), file_schema, batch, downcast_ns_timestamp_to_us=False, projected_missing_fields=missing
    )

    assert missing == {}
    assert projected.schema.names == ["id", "label", "note"]
    assert projected.column("label").to_pylist()[:2] == ["a0", "a1"]
    assert projected.column("note").to_pylist() == [None] * 10


def test_read_position_deletes_maps_each_data_file_to_its_deleted_positions(sqlite_catalog: SqlCatalog) -> None:
    table = _table(sqlite_catalog)
    low, high = _data_files(table)
    table = commit_position_deletes(table, {low.file_path: [1, 3], high.file_path: [0]})
    deletes = [f for task in table.scan().plan_files() for f in task.delete_files]
    assert {d.content for d in deletes} == {DataFileContent.POSITION_DELETES}

    positions: dict[str, list[int]] = {}
    for delete in {d.file_path: d for d in deletes}.values():
        for path, chunks in read_position_deletes(table.io, delete).items():
            positions.setdefault(path, []).extend(chunks.to_pylist())

    assert {path: sorted(p) for path, p in positions.items()} == {low.file_path: [1, 3], high.file_path: [0]}


def test_the_avro_codecs_pyiceberg_writes_are_known() -> None:
    assert {"null", "deflate", "snappy", "zstandard"} <= set(AVRO_CODECS)
    assert AVRO_CODECS["null"] is None


def test_assert_current_metadata_refuses_a_commit_on_changed_metadata_in_the_catalog(
    sqlite_catalog: SqlCatalog,
) -> None:
    """The catalog validates our requirement in-process: equal metadata commits, any other commit since refuses it."""
    table = _table(sqlite_catalog)
    assert validates_requirements_in_process(sqlite_catalog)
    planned = table.metadata
    update = SetPropertiesUpdate(updates={"ours": "1"})
    with sqlite_catalog.load_table("db.t").transaction() as tx:
        tx.set_properties({"theirs": "1"})
    with pytest.raises(CommitFailedException, match="changed by another commit"):
        sqlite_catalog.commit_table(table, (current_metadata_requirement(planned),), (update,))
    fresh = sqlite_catalog.load_table("db.t")
    response = sqlite_catalog.commit_table(fresh, (current_metadata_requirement(fresh.metadata),), (update,))
    assert response.metadata.properties["ours"] == "1"


def test_a_rest_request_cannot_carry_assert_current_metadata(sqlite_catalog: SqlCatalog) -> None:
    """Why REST catalogs get the location check and the restore instead (commit_fence)."""
    requirement = current_metadata_requirement(_table(sqlite_catalog).metadata)
    with pytest.raises(ValidationError):
        CommitTableRequest(identifier=TableIdentifier(namespace=["db"], name="t"), requirements=(requirement,))  # type: ignore[arg-type]  # pydantic builds the Namespace from the list
