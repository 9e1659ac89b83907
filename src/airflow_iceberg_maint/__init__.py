"""Keep Apache Iceberg tables healthy, from Airflow or from Python: orphan-file removal, snapshot expiry and
secondary indexes.

The Python API is what this package exports (``__all__``, docs/python.md): ``remove_orphan_files``,
``expire_snapshots``, the index operations (``create_index``, ``refresh_index``, ``lookup_index``, ...),
``load_table``, ``rewrite_data_files``, ``rewrite_manifests``, ``table_health`` and ``fleet_health``, their typed
reports and errors. Everything not exported here is internal and may change.
The same engines serve the ``iceberg-maint`` command (docs/cli.md) and the Airflow provider
(``airflow_iceberg_maint.airflow``, docs/airflow.md).

The core library (everything outside ``airflow_iceberg_maint.airflow``) never imports Airflow.
Comments cite the safety rules S1 to S21 of ``docs/safety.md``, which names the tests proving each.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    # pyproject.toml's version, as installed: the one place it is written (provider_info reads this too).
    __version__ = version("airflow-iceberg-maint")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_iceberg_maint.api.cleanup import PrefixMismatchMode, expire_snapshots, remove_orphan_files
    from airflow_iceberg_maint.api.compaction import (
        DataRewritePlan,
        DataRewriteReport,
        FileGroupPlan,
        Strategy,
        plan_data_rewrite,
        rewrite_data_files,
        rewrite_manifests,
    )
    from airflow_iceberg_maint.api.health import fleet_health, table_health
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
    from airflow_iceberg_maint.compaction.manifests import ManifestRewriteReport
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
    from airflow_iceberg_maint.health.fleet import FleetHealth
    from airflow_iceberg_maint.health.report import HealthReport
    from airflow_iceberg_maint.index.lifecycle.lag import FileCounts, IndexLag
    from airflow_iceberg_maint.index.lifecycle.references import UnreferencedReport
    from airflow_iceberg_maint.index.read.lookup import LookupResult
    from airflow_iceberg_maint.index.write.refresh import RefreshResult
    from airflow_iceberg_maint.orphans.report import OrphanReport
    from airflow_iceberg_maint.reachability.sources import ReferenceSource

__all__ = [
    "CatalogLike",
    "CatalogListingError",
    "CommitOutcomeUnknownError",
    "DataRewritePlan",
    "DataRewriteReport",
    "ExpiryConflictError",
    "ExpiryReport",
    "ExtractExpiryReport",
    "FileCounts",
    "FileGroupPlan",
    "FleetHealth",
    "GcDisabledError",
    "HealthReport",
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
    "ManifestRewriteReport",
    "MetadataReadError",
    "OrphanReport",
    "PrefixMismatchError",
    "PrefixMismatchMode",
    "ReferenceSource",
    "RefreshResult",
    "SnapshotPin",
    "StorageError",
    "Strategy",
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
    "fleet_health",
    "index_lag",
    "list_indexes",
    "load_table",
    "lookup_index",
    "lookup_index_range",
    "open_catalog",
    "plan_data_rewrite",
    "refresh_index",
    "remove_orphan_files",
    "remove_unreferenced_index_files",
    "rewrite_data_files",
    "rewrite_manifests",
    "table_health",
]


#: The modules the names of ``__all__`` come from (those of the imports above), searched in order on first use.
_HOMES = (
    "api.cleanup",
    "api.compaction",
    "api.health",
    "api.indexes",
    "api.tables",
    "compaction.manifests",
    "errors",
    "expiry.pins",
    "expiry.run",
    "health.fleet",
    "health.report",
    "index.lifecycle.lag",
    "index.lifecycle.references",
    "index.read.lookup",
    "index.write.refresh",
    "orphans.report",
    "reachability.sources",
)


def __getattr__(name: str) -> Any:
    # The API is imported on first use: Airflow imports this package for its provider information and
    # the command line for its version, and neither should load pyiceberg and pyarrow for that.
    if name in __all__:
        for home in _HOMES:
            found = vars(importlib.import_module(f"{__name__}.{home}")).get(name)
            if found is not None:
                globals()[name] = found  # found once
                return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
