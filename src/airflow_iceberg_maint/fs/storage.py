"""One storage layer for every store: the capabilities the project uses (``backends.storage_for`` picks one).

Like Iceberg's FileIO capability interfaces: listing by prefix (orphan scans), bulk deletion,
and conditional writes (the exclusive create of index commits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from airflow_iceberg_maint.errors import UnsupportedStoreError

#: Decides whether a path component (directory or file name) below the scan root is listed.
KeepComponent = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A listed file. ``mtime`` is None when storage did not say; such a file is never a candidate."""

    path: str
    size: int
    mtime: datetime | None
    inode: tuple[int, int] | None = None  # (device, inode) of the file itself, on local disks


@dataclass
class DeleteOutcome:
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    requests: int = 0


class SupportsPrefixListing(Protocol):
    list_calls: int

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        """Every regular file below ``root`` whose components below the root all pass ``keep``."""
        ...

    def list_level(self, directory: str, keep: KeepComponent) -> tuple[list[FileInfo], list[str]]:
        """The files directly in ``directory``, spelled as ``list_files`` spells them, and the names of its
        sub-directories (``""`` for an S3 prefix ending in ``//``).

        Names that fail ``keep`` and symlinks are left out; a sharded scan lists each
        sub-directory with ``list_files`` on its own.
        """
        ...


class SupportsBulkDelete(Protocol):
    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        """Delete the files; a file already gone counts as deleted."""
        ...


class SupportsConditionalWrites(Protocol):
    """What the index commit protocol needs: an exclusive create, reads, and directory listings."""

    #: True when a create that returned False may have been created by this writer itself (a
    #: client that retries a request whose first reply was lost); False when False is final.
    create_may_retry: bool

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        """(file names, sub-directory names) directly in ``directory``; empty when it does not exist."""
        ...

    def create_exclusive(self, location: str, data: bytes) -> bool:
        """Write a complete file only if none exists there; False when one already does."""
        ...

    def read(self, location: str) -> bytes: ...

    def delete(self, location: str) -> None: ...


class Storage(SupportsPrefixListing, SupportsBulkDelete, SupportsConditionalWrites, Protocol):
    """Every operation the project needs from a store; what ``storage_for`` returns."""


def require_capabilities(storage: object, location: str, names: Sequence[str]) -> None:
    """Refuse, before anything is listed, a backend that lacks one of ``names`` (methods of ``Storage``).

    Every backend of ``storage_for`` implements them all (a test enumerates them); this turns a
    backend that does not into a refusal no retry can change, instead of an AttributeError mid-run.
    """
    missing = [name for name in names if not callable(getattr(storage, name, None))]
    if missing:
        raise UnsupportedStoreError(
            f"location {location!r}: its storage backend {type(storage).__name__} cannot {', '.join(missing)}, "
            "which this action needs"
        )
