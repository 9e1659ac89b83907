"""Listing and deleting files where tables live: the local filesystem and S3."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from airflow_iceberg_maint.locations import Uri

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


def storage_for(location: str, io_properties: Mapping[str, str]) -> Storage:
    """The storage backend for a location, configured from the table's FileIO properties."""
    uri = Uri.parse(location)
    if uri.is_local:
        from airflow_iceberg_maint.storage.local import LocalStorage

        return LocalStorage()
    if uri.scheme in ("s3", "s3a", "s3n"):
        from airflow_iceberg_maint.storage.s3 import S3Storage

        return S3Storage.from_properties(io_properties)
    raise ValueError(f"location {location!r}: scheme {uri.scheme!r} is not supported (expected file or s3)")
