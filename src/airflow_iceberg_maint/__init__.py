"""Keep Apache Iceberg tables healthy, from Airflow or from Python: orphan-file removal, snapshot expiry and
secondary indexes.

The Python API is what this package exports (``__all__``, docs/python.md): ``remove_orphan_files``,
``expire_snapshots``, the index operations (``create_index``, ``refresh_index``, ``lookup_index``, ...),
``load_table``, their typed reports and errors. Everything not exported here is internal and may change.
The same engines serve the ``iceberg-maint`` command (docs/cli.md) and the Airflow provider
(``airflow_iceberg_maint.airflow``, docs/airflow.md).

The core library (everything outside ``airflow_iceberg_maint.airflow``) never imports Airflow.
Comments cite the safety rules S1 to S17 of ``docs/safety.md``, which names the tests proving each.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_iceberg_maint.api import (
        CatalogLike,
        CatalogListingError,
        CommitOutcomeUnknownError,
        ExpiryConflictError,
        ExpiryReport,
        ExtractExpiryReport,
        FileCounts,
        GcDisabledError,
        IncompleteMetadataError,
        IndexCommitConflictError,
        IndexExistsError,
        IndexInfo,
        IndexLag,
        IndexNotFoundError,
        InvalidInputError,
        LocationRefusedError,
        LookupResult,
        MaintenanceError,
        MetadataReadError,
        OrphanReport,
        PrefixMismatchError,
        PrefixMismatchMode,
        ReferenceSource,
        RefreshResult,
        SnapshotPin,
        StorageError,
        TableBusyError,
        TableLike,
        TableNotFoundError,
        UnknownLocationsError,
        UnreferencedReport,
        UnsupportedStoreError,
        WriteRefusedError,
        create_index,
        expire_index_extracts,
        expire_snapshots,
        index_lag,
        list_indexes,
        load_table,
        lookup_index,
        lookup_index_range,
        open_catalog,
        refresh_index,
        remove_orphan_files,
        remove_unreferenced_index_files,
    )

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
    "__version__",
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


def __getattr__(name: str) -> Any:
    # The API is imported on first use: Airflow imports this package for its provider information and
    # the command line for its version, and neither should load pyiceberg and pyarrow for that.
    if name in __all__:
        from airflow_iceberg_maint import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
