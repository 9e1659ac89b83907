"""Metadata files are written byte for byte as before the models moved to pydantic.

The files in ``metadata_files/`` were written by the hand-written model this one replaced: the
draft's worked example (``APPENDIX_C``), a full form (every optional field, non-ASCII text), a
minimal form, and the metadata ``built_metadata`` makes through the builders (an evolved extract schema, stats-only
fields, extracts with and without properties, a metadata-log entry). Reading each file and writing
it again, and building the same metadata again, must give the same bytes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType, TimestampType

from airflow_iceberg_maint.index.metadata.builders import new_extract, new_index_metadata, with_extract_schema_for
from airflow_iceberg_maint.index.metadata.model import IndexMetadata, MetadataLogEntry

FILES = Path(__file__).parent / "metadata_files"
LOCATION = "s3://bucket/warehouse/db.db/events/index/by_id"


def _rows(table_schema: Schema, ids: list[int]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "name": f"n{i}", "ts": datetime(2024, 1, i), "price": Decimal("1.50")} for i in ids],
        schema=table_schema.as_arrow(),
    )


def built_metadata(catalog: Catalog) -> IndexMetadata:
    """Metadata made by the builders on a real table, its random IDs, times and paths then fixed."""
    table = catalog.create_table(
        "db.events",
        Schema(
            NestedField(1, "id", IntegerType(), required=False),
            NestedField(2, "name", StringType(), required=True),
            NestedField(3, "ts", TimestampType(), required=False),
            NestedField(4, "price", DecimalType(9, 2), required=False),
        ),
    )
    table.append(_rows(table.schema(), [1]))
    ordering = ["bucket(16, id)", "id", "day(ts)", "truncate(4, name)"]
    metadata = new_index_metadata(
        table, "by_id", ordering, ["price"], True, {"write.region.target-file-size-bytes": "1000"}
    )
    first = table.current_snapshot().snapshot_id
    extract = new_extract(metadata, first, 0, "metadata/tracking-1.parquet", 2048, {"built-by": "test"})
    metadata = metadata.with_extract(extract)
    with table.update_schema() as update:
        update.update_column("id", LongType())
    table.append(_rows(table.schema(), [2]))
    second = table.current_snapshot().snapshot_id
    metadata, schema_id = with_extract_schema_for(metadata, table.metadata, second)
    metadata = metadata.with_extract(new_extract(metadata, second, schema_id, f"{LOCATION}/metadata/t-2.parquet", 4096))
    fixed = tuple(
        replace(e, extract_id=10 + i, source_table_snapshot_id=100 + i, timestamp_ms=1_700_000_000_000 + i)
        for i, e in enumerate(metadata.extracts)
    )
    return replace(
        metadata,
        index_uuid="9c12d441-03fe-4693-9a96-a0705ddf69c1",
        table_uuid="fb072c92-a02b-11e9-ae9c-1bb7bc9eca94",
        location=LOCATION,
        last_updated_ms=1_700_000_000_005,
        extracts=fixed,
        metadata_log=(MetadataLogEntry(f"{LOCATION}/metadata/00000-x.metadata.json", 1_700_000_000_000),),
    )


@pytest.mark.parametrize("name", ["appendix_c", "full", "minimal", "built"])
def test_a_file_read_then_written_keeps_its_bytes(name: str) -> None:
    data = (FILES / f"{name}.metadata.json").read_bytes()
    metadata = IndexMetadata.from_bytes(data, name)
    assert metadata.to_bytes() == data
    assert IndexMetadata.from_bytes(metadata.to_bytes(), name) == metadata


def test_built_metadata_is_written_as_before(sqlite_catalog: Catalog) -> None:
    assert built_metadata(sqlite_catalog).to_bytes() == (FILES / "built.metadata.json").read_bytes()
