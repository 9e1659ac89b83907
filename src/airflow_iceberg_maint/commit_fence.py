"""A commit checks everything its plan read (S18).

Every commit the project makes to a table goes through ``commit_fenced``, on top of the metadata
its plan read (``base``, read from ``base_location``):

- a catalog that validates requirements in-process under its atomic swap (pyiceberg's SQL, Glue
  and Hive catalogs) gets ``pyiceberg_compat.AssertCurrentMetadata``: any commit that landed since the plan read
  the table fails ours (``CommitFailedException``), and the caller plans again;
- every catalog gets the protocol's own requirements on what the plan read: the table UUID, every
  ref's snapshot, the schema, partition spec and sort order ids and the last assigned ids;
- a catalog that cannot express more (REST: requirements are serialized, a type of our own is
  refused) is asked for its current metadata location just before the commit, and a location
  other than ``base_location`` fails the commit the same way. What lands between that check and
  the commit is found after it: ``Committed.applied_on_base`` is False and ``predecessor`` names
  the metadata the catalog applied the commit on, for the caller to restore from.

The committed metadata is always read from the committed metadata file, never taken from the
catalog's response (S2: a response may hold only some snapshots).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    AssertCurrentSchemaId,
    AssertDefaultSortOrderId,
    AssertDefaultSpecId,
    AssertLastAssignedFieldId,
    AssertLastAssignedPartitionId,
    AssertRefSnapshotId,
    AssertTableUUID,
    TableRequirement,
    TableUpdate,
)

from airflow_iceberg_maint.catalog import complete_metadata
from airflow_iceberg_maint.pyiceberg_compat import current_metadata_requirement, validates_requirements_in_process

# The models are built from their JSON field names (the aliases): mypy's view of pydantic accepts no other.


def protocol_requirements(base: TableMetadata) -> tuple[TableRequirement, ...]:
    """Every requirement the REST protocol can express about what a plan read from ``base``.

    One per ref (pyiceberg's ``Transaction`` would keep one requirement of each type, so one ref only).
    """
    return (
        AssertTableUUID(uuid=base.table_uuid),
        AssertCurrentSchemaId.model_validate({"current-schema-id": base.current_schema_id}),
        AssertLastAssignedFieldId.model_validate({"last-assigned-field-id": base.last_column_id}),
        AssertDefaultSpecId.model_validate({"default-spec-id": base.default_spec_id}),
        AssertLastAssignedPartitionId.model_validate({"last-assigned-partition-id": base.last_partition_id}),
        AssertDefaultSortOrderId.model_validate({"default-sort-order-id": base.default_sort_order_id}),
        *(
            AssertRefSnapshotId.model_validate({"ref": name, "snapshot-id": ref.snapshot_id})
            for name, ref in sorted(base.refs.items())
        ),
    )


@dataclass(frozen=True)
class Committed:
    metadata: TableMetadata  # complete, read from ``location``
    location: str
    #: The metadata file the catalog applied the commit on (the last entry of the committed metadata log).
    predecessor: str | None
    applied_on_base: bool


def read_metadata_file(table: Table, metadata: TableMetadata, location: str) -> TableMetadata:
    """The complete metadata at ``location``, of which ``metadata`` (a catalog's answer) must be part."""
    answer = Table(
        identifier=table.name(), metadata=metadata, metadata_location=location, io=table.io, catalog=table.catalog
    )
    return complete_metadata(".".join(table.name()), answer)


def _refuse_if_moved(table: Table, base_location: str) -> None:
    current = table.catalog.load_table(table.name()).metadata_location
    if current != base_location:
        raise CommitFailedException(f"the table's metadata is {current}, not {base_location} the plan read")


def commit_fenced(table: Table, base: TableMetadata, base_location: str, updates: Sequence[TableUpdate]) -> Committed:
    """Commit ``updates`` on ``base``; raises ``CommitFailedException`` when the table is seen to have moved.

    ``table`` then holds the committed metadata, complete.
    """
    requirements = protocol_requirements(base)
    if validates_requirements_in_process(table.catalog):
        requirements = (*requirements, current_metadata_requirement(base))
    else:
        _refuse_if_moved(table, base_location)
    response = table.catalog.commit_table(table, requirements, tuple(updates))
    metadata = read_metadata_file(table, response.metadata, response.metadata_location)
    table.metadata, table.metadata_location = metadata, response.metadata_location
    log = metadata.metadata_log
    predecessor = log[-1].metadata_file if log else None
    return Committed(metadata, response.metadata_location, predecessor, predecessor == base_location)
