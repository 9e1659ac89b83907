"""The one door to pyiceberg's internals: every private or undocumented pyiceberg API the project uses.

pyiceberg has no public API yet for these: pruning data files by column bounds, the projection
of a file's columns onto a table schema (with the values of columns a file lacks), reading
position deletes, the Avro block decoder, the filesystem a FileIO reads through, a commit
requirement of the project's own checked by the catalogs that validate requirements in-process,
and the pieces of its writer compaction assembles (Parquet writer options, statistics from a
footer, a delete-manifest writer, a partition key, a ``replace`` summary). Each is
called here with keyword arguments, so a renamed or reordered parameter fails at once instead
of passing a value to the wrong place.
``pyproject.toml`` caps pyiceberg at the newest minor version tested; ``make test-newest-pyiceberg``
runs the tests that go through this module against the newest pyiceberg release.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa
from pydantic import PrivateAttr
from pyiceberg.avro.codecs import KNOWN_CODECS
from pyiceberg.avro.codecs.codec import Codec
from pyiceberg.avro.decoder import BinaryDecoder, new_decoder
from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.io import FileIO, OutputFile
from pyiceberg.io.pyarrow import _get_column_projection_values, _read_deletes, _to_requested_schema
from pyiceberg.manifest import DataFile, ManifestContent, ManifestWriter, ManifestWriterV2, write_manifest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, ValidatableTableRequirement

#: Avro ``avro.codec`` name -> its decompressor (None for ``null``).
AVRO_CODECS: dict[str, type[Codec] | None] = dict(KNOWN_CODECS)  # type: ignore[arg-type]

__all__ = [
    "AVRO_CODECS",
    "AssertCurrentMetadata",
    "BinaryDecoder",
    "DeleteManifestWriter",
    "avro_decoder",
    "bounds_may_match",
    "current_metadata_requirement",
    "data_file_statistics",
    "manifest_writer",
    "missing_column_values",
    "parquet_writer_options",
    "partition_key",
    "project_batch",
    "read_position_deletes",
    "replace_summary",
    "to_file_schema",
    "validates_requirements_in_process",
]


def bounds_may_match(schema: Schema, expression: BooleanExpression) -> Callable[[DataFile], bool]:
    """Whether a data file's column bounds may hold rows matching ``expression`` (pyiceberg's own pruning)."""
    return _InclusiveMetricsEvaluator(schema=schema, expr=expression, case_sensitive=True).eval


def missing_column_values(
    data_file: DataFile,
    projected_schema: Schema,
    table_schema: Schema,
    partition_spec: PartitionSpec | None,
    file_field_ids: set[int],
) -> dict[int, Any]:
    """Values of projected columns the file lacks (identity partition values, initial defaults)."""
    return _get_column_projection_values(
        file=data_file,
        projected_schema=projected_schema,
        table_schema=table_schema,
        partition_spec=partition_spec,
        file_project_field_ids=file_field_ids,
    )


def project_batch(
    requested_schema: Schema,
    file_schema: Schema,
    batch: pa.RecordBatch,
    *,
    downcast_ns_timestamp_to_us: bool,
    projected_missing_fields: dict[int, Any],
) -> pa.RecordBatch:
    """A batch read from a data file, projected on the requested schema as pyiceberg's scans do."""
    return _to_requested_schema(
        requested_schema=requested_schema,
        file_schema=file_schema,
        batch=batch,
        downcast_ns_timestamp_to_us=downcast_ns_timestamp_to_us,
        projected_missing_fields=projected_missing_fields,
        allow_timestamp_tz_mismatch=True,
    )


def read_position_deletes(io: FileIO, delete_file: DataFile) -> dict[str, pa.ChunkedArray]:
    """Data file path -> deleted positions, from a position delete file or a deletion vector."""
    return _read_deletes(io=io, data_file=delete_file)


def avro_decoder(data: bytes) -> BinaryDecoder:
    """pyiceberg's fastest Avro binary decoder over ``data``."""
    return new_decoder(data)


def file_io_filesystem(io: FileIO, scheme: str, authority: str) -> Any | None:
    """The fsspec filesystem ``io`` reads ``scheme://authority/...`` through (pyarrow's seen through fsspec).

    None for a FileIO of another kind.
    """
    from pyiceberg.io.fsspec import FsspecFileIO
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if isinstance(io, PyArrowFileIO):
        from fsspec.implementations.arrow import ArrowFSWrapper

        return ArrowFSWrapper(io.fs_by_scheme(scheme, authority))
    if isinstance(io, FsspecFileIO):
        return io.get_fs(scheme)
    return None


class AssertCurrentMetadata(ValidatableTableRequirement):
    """The table's current metadata must be exactly ``expected``, the metadata a plan read.

    pyiceberg's ``MetastoreCatalog`` subclasses (SQL, Glue, Hive, DynamoDB) call ``validate`` on the
    metadata they read under their atomic swap (``_update_and_stage_table``), so any commit that landed
    since (a new ref, a property, a snapshot, a schema) fails ours with ``CommitFailedException``. Not a
    type of the REST protocol: a REST catalog's request refuses it (``validates_requirements_in_process``).
    """

    type: str = "assert-current-metadata"
    _expected: TableMetadata = PrivateAttr()

    def __init__(self, expected: TableMetadata) -> None:
        super().__init__(type="assert-current-metadata")
        self._expected = expected

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]
        if base_metadata is None:
            raise CommitFailedException("Requirement failed: current table metadata is missing")
        if base_metadata != self._expected:
            raise CommitFailedException(
                "Requirement failed: the table was changed by another commit since the plan read it "
                f"(last updated {base_metadata.last_updated_ms}, planned on {self._expected.last_updated_ms})"
            )


def current_metadata_requirement(expected: TableMetadata) -> TableRequirement:
    """``AssertCurrentMetadata(expected)``, typed as the requirements a catalog's ``commit_table`` takes."""
    return cast(TableRequirement, AssertCurrentMetadata(expected))


def validates_requirements_in_process(catalog: Catalog) -> bool:
    """Whether ``catalog`` checks each requirement's ``validate`` against its current metadata inside its commit."""
    return isinstance(catalog, MetastoreCatalog)


# Compaction's writes (``compaction/``): pyiceberg 0.12 has no rewrite, so its file writer's settings, its
# statistics from a Parquet footer, its manifest writers and a partition key are used piece by piece.


def to_file_schema(file_schema: Schema, table_schema: Schema, batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of ``table_schema`` rows as pyiceberg writes it to a data file: ``file_schema`` with field IDs."""
    from pyiceberg.io.fileformat import FileFormatFactory
    from pyiceberg.manifest import FileFormat

    return _to_requested_schema(
        requested_schema=file_schema,
        file_schema=table_schema,
        batch=batch,
        include_field_ids=True,
        format_model=FileFormatFactory.get(FileFormat.PARQUET),
    )


def parquet_writer_options(properties: dict[str, str]) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` keyword arguments from a table's ``write.parquet.*`` properties."""
    import warnings

    from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs

    with warnings.catch_warnings():  # pyiceberg warns of the byte-size properties it ignores; compaction sizes files
        warnings.simplefilter("ignore")
        return _get_parquet_writer_kwargs(properties)


def data_file_statistics(schema: Schema, properties: dict[str, str], footer: Any) -> dict[str, Any]:
    """The ``DataFile`` fields of a written Parquet file (record count, sizes, bounds) from its footer."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return statistics.to_serialized_dict()


def partition_key(spec: PartitionSpec, schema: Schema, partition: Any) -> Any:
    """A ``PartitionKey`` for a location provider, from a partition tuple already transformed (None: unpartitioned)."""
    from pyiceberg.partitioning import PartitionKey

    if spec.is_unpartitioned():
        return None
    key = PartitionKey(field_values=[], partition_spec=spec, schema=schema)
    key.__dict__["partition"] = partition  # its cached property, which would transform raw values
    return key


class DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer for delete files (pyiceberg 0.12 writes data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def manifest_writer(
    *,
    format_version: int,
    content: ManifestContent,
    spec: PartitionSpec,
    schema: Schema,
    output_file: OutputFile,
    snapshot_id: int,
    avro_compression: str,
) -> ManifestWriter:
    """A manifest writer of ``content`` (data or deletes) for a table of ``format_version`` 1 or 2.

    Raises ``ValueError`` for what pyiceberg cannot write: a v3 manifest, deletes in a v1 table.
    """
    compression: Any = avro_compression
    if content == ManifestContent.DELETES:
        if format_version != 2:
            raise ValueError(f"cannot write a delete manifest for table format version {format_version}")
        return DeleteManifestWriter(spec, schema, output_file, snapshot_id, compression)
    if format_version not in (1, 2):
        raise ValueError(f"cannot write a manifest for table format version {format_version}")
    return write_manifest(
        format_version=cast(Any, format_version),
        spec=spec,
        schema=schema,
        output_file=output_file,
        snapshot_id=snapshot_id,
        avro_compression=compression,
    )


def replace_summary(added: list[DataFile], removed: list[DataFile], metadata: TableMetadata) -> Any:
    """The summary of a ``replace`` snapshot on the current one: pyiceberg computes the totals of the
    operations it writes only, so they are computed as for an overwrite and the operation set after."""
    from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries

    schema, specs = metadata.schema(), metadata.specs()
    collector = SnapshotSummaryCollector()
    for data_file in added:
        collector.add_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    for data_file in removed:
        collector.remove_file(data_file, schema=schema, partition_spec=specs[data_file.spec_id])
    current = metadata.current_snapshot()
    totals = update_snapshot_summaries(
        Summary(Operation.OVERWRITE, **collector.build()), previous_summary=current.summary if current else None
    )
    return Summary(Operation.REPLACE, **totals.additional_properties)
