"""Compaction for Python callers, with the command line's options and safe defaults (docs/cli.md, "Compaction")."""

from __future__ import annotations

from airflow_iceberg_maint.api.tables import (
    DEFAULT_CATALOG,
    CatalogLike,
    TableLike,
    check_flag,
    check_whole,
    resolve_table,
)
from airflow_iceberg_maint.compaction import manifests
from airflow_iceberg_maint.compaction.manifests import ManifestRewriteReport


def rewrite_manifests(
    table: TableLike,
    *,
    catalog: CatalogLike = DEFAULT_CATALOG,
    target_manifest_size_bytes: int | None = None,
    dry_run: bool = True,
) -> ManifestRewriteReport:
    """Regroup the live entries of the table's current snapshot by partition into manifests of the target size,
    in one ``replace`` commit when ``dry_run=False`` (``iceberg-maint rewrite-manifests``, docs/cli.md).

    ``table``: a pyiceberg ``Table`` or ``"namespace.table"`` in ``catalog``. The target is
    ``target_manifest_size_bytes``, else the table's ``commit.manifest.target-size-bytes``, else 8 MB. Every
    entry keeps its snapshot id and sequence numbers, so every snapshot reads the same rows. A dry run reads
    manifests only and reports the plan. It does not take the table's lease: the command line and the Airflow
    operator do.
    """
    check_whole(target_manifest_size_bytes, "target_manifest_size_bytes", 1)
    check_flag(dry_run, "dry_run")
    loaded = resolve_table(table, catalog)
    return manifests.rewrite_manifests(loaded, target_manifest_size_bytes=target_manifest_size_bytes, dry_run=dry_run)
