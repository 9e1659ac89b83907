"""Listing and deleting files where tables live: the local filesystem, S3, GCS and Azure."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import ModuleType
from typing import Protocol

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.locations import Uri

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
GCS_SCHEMES = frozenset({"gs", "gcs"})
AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
SUPPORTED = "file, s3, s3a, s3n, gs, gcs, abfs, abfss, wasb or wasbs"

#: Decides whether a path component (directory or file name) below the scan root is listed.
KeepComponent = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A listed file. ``mtime`` is None when storage did not say; such a file is never a candidate."""

    path: str
    size: int
    mtime: datetime | None


@dataclass
class DeleteOutcome:
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    requests: int = 0


class Storage(Protocol):
    list_calls: int

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        """Every regular file below ``root`` whose components below the root all pass ``keep``."""
        ...

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        """Delete the files; a file already gone counts as deleted."""
        ...


def _backend(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(f"airflow_iceberg_maint.storage.{module}")
    except ImportError as exc:
        raise ImportError(f"{exc}: install the client with 'pip install airflow-iceberg-maint[{extra}]'") from exc


def unsupported_scheme(location: str) -> InvalidInputError:
    # Not a plain ValueError, which Airflow would retry: the same location fails the same way every time.
    scheme = Uri.parse(location).scheme
    return InvalidInputError(f"location {location!r}: scheme {scheme!r} is not supported (expected {SUPPORTED})")


def storage_for(location: str, io_properties: Mapping[str, str]) -> Storage:
    """The storage backend for a location, configured from the table's FileIO properties."""
    uri = Uri.parse(location)
    if uri.is_local:
        from airflow_iceberg_maint.storage.local import LocalStorage

        return LocalStorage()
    if uri.scheme in S3_SCHEMES:
        from airflow_iceberg_maint.storage.s3 import S3Storage

        return S3Storage.from_properties(io_properties)
    if uri.scheme in GCS_SCHEMES:
        return _backend("gcs", "gcs").GcsStorage.from_properties(io_properties)  # type: ignore[no-any-return]
    if uri.scheme in AZURE_SCHEMES:
        return _backend("adls", "adls").AzureStorage.from_properties(io_properties, location)  # type: ignore[no-any-return]
    raise unsupported_scheme(location)
