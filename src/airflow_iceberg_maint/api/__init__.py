"""The public Python API, re-exported by ``airflow_iceberg_maint`` (docs/python.md): import it from there.

``tables``: catalogs and tables, and the argument checks; ``cleanup``: orphan-file removal and snapshot
expiry; ``indexes``: the index operations. Each function calls the same engine as the command line.
"""

from airflow_iceberg_maint.api.cleanup import PrefixMismatchMode, expire_snapshots, remove_orphan_files
from airflow_iceberg_maint.api.indexes import (
    ExtractExpiryReport,
    IndexInfo,
    create_index,
    expire_index_extracts,
    index_lag,
    list_indexes,
    lookup_index,
    lookup_index_range,
    refresh_index,
    remove_unreferenced_index_files,
)
from airflow_iceberg_maint.api.tables import CatalogLike, TableLike, load_table, open_catalog
from airflow_iceberg_maint.errors import (
    CatalogListingError,
    CommitOutcomeUnknownError,
    ExpiryConflictError,
    GcDisabledError,
    IncompleteMetadataError,
    IndexCommitConflictError,
    IndexExistsError,
    IndexNotFoundError,
    InvalidInputError,
    LocationRefusedError,
    MaintenanceError,
    MetadataReadError,
    PrefixMismatchError,
    StorageError,
    TableBusyError,
    TableNotFoundError,
    UnknownLocationsError,
    UnsupportedStoreError,
    WriteRefusedError,
)
from airflow_iceberg_maint.expiry.pins import SnapshotPin
from airflow_iceberg_maint.expiry.run import ExpiryReport
from airflow_iceberg_maint.index.lifecycle.lag import FileCounts, IndexLag
from airflow_iceberg_maint.index.lifecycle.references import UnreferencedReport
from airflow_iceberg_maint.index.read.lookup import LookupResult
from airflow_iceberg_maint.index.write.refresh import RefreshResult
from airflow_iceberg_maint.orphans.report import OrphanReport
from airflow_iceberg_maint.orphans.sources import ReferenceSource

__all__ = [
    "CatalogLike",
    "CatalogListingError",
    "CommitOutcomeUnknownError",
    "ExpiryConflictError",
    "ExpiryReport",
    "ExtractExpiryReport",
    "FileCounts",
    "GcDisabledError",
    "IncompleteMetadataError",
    "IndexCommitConflictError",
    "IndexExistsError",
    "IndexInfo",
    "IndexLag",
    "IndexNotFoundError",
    "InvalidInputError",
    "LocationRefusedError",
    "LookupResult",
    "MaintenanceError",
    "MetadataReadError",
    "OrphanReport",
    "PrefixMismatchError",
    "PrefixMismatchMode",
    "ReferenceSource",
    "RefreshResult",
    "SnapshotPin",
    "StorageError",
    "TableBusyError",
    "TableLike",
    "TableNotFoundError",
    "UnknownLocationsError",
    "UnreferencedReport",
    "UnsupportedStoreError",
    "WriteRefusedError",
    "create_index",
    "expire_index_extracts",
    "expire_snapshots",
    "index_lag",
    "list_indexes",
    "load_table",
    "lookup_index",
    "lookup_index_range",
    "open_catalog",
    "refresh_index",
    "remove_orphan_files",
    "remove_unreferenced_index_files",
]
