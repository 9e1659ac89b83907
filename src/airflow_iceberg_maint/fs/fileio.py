"""Listing and deleting through the filesystem pyiceberg's FileIO builds for a table.

Used where boto3 cannot act as the table's FileIO does (remote signing), or when the table's
properties ask for it (``iceberg-maint.s3-client=file-io``): every request then carries exactly the
FileIO's identity. ``PyArrowFileIO``'s pyarrow filesystem is used through fsspec's API,
``FsspecFileIO``'s filesystem as it is. Deletes take one request per file (a pyarrow filesystem has
no multi-object delete); index commits need a filesystem that can open a file in mode ``xb``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pyiceberg.io import load_file_io

from airflow_iceberg_maint.errors import InvalidInputError, StorageError
from airflow_iceberg_maint.fs.batches import delete_each
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, Storage
from airflow_iceberg_maint.pyiceberg_compat import file_io_filesystem


class FileIOStorage:
    create_may_retry = True  # whether the filesystem retries a write whose reply was lost is not known here

    def __init__(self, fs: Any, scheme: str) -> None:
        self.fs = fs
        self.scheme = scheme
        self.list_calls = 0

    @classmethod
    def for_location(cls, location: str, props: Mapping[str, Any]) -> FileIOStorage:
        """The filesystem of the FileIO pyiceberg builds from ``props`` for ``location`` (as for the table)."""
        uri = Uri.parse(location)
        try:
            io = load_file_io(dict(props), location)
        except ValueError as exc:
            raise InvalidInputError(f"location {location!r}: pyiceberg cannot build its FileIO: {exc}") from exc
        fs = file_io_filesystem(io, uri.scheme, uri.authority)
        if fs is None:
            raise InvalidInputError(
                f"location {location!r}: its FileIO {type(io).__name__} exposes no filesystem "
                "to list and delete through"
            )
        return cls(fs, uri.scheme)

    def _name(self, location: str) -> str:
        """fsspec's name for a location: ``bucket/key``, without the scheme."""
        uri = Uri.parse(location)
        return f"{uri.authority}{uri.path}"

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        base = self._name(root.rstrip("/"))
        try:
            # on_error="raise": fsspec would otherwise list a directory it cannot read as empty.
            found = self.fs.find(base, detail=True, withdirs=False, on_error="raise")
        except FileNotFoundError:
            found = {}
        except OSError as exc:
            # An incomplete listing is never used: the run stops before matching or deleting anything.
            raise StorageError(f"{root}: cannot be listed ({type(exc).__name__}: {exc})") from exc
        self.list_calls += 1
        for name, info in sorted(found.items()):
            # The trailing '/' keeps 't_backup/...' out of a listing of 't'.
            if info.get("type") != "file" or not name.startswith(base + "/"):
                continue
            if all(keep(part) for part in name[len(base) + 1 :].split("/")):
                yield FileInfo(f"{self.scheme}://{name}", int(info.get("size") or 0), _mtime(info))

    def list_level(self, directory: str, keep: KeepComponent) -> tuple[list[FileInfo], list[str]]:
        base = self._name(directory.rstrip("/"))
        try:
            # What the store holds now, not what an fsspec filesystem cached of it (s3fs keeps listings).
            self.fs.invalidate_cache(base)
            entries = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            entries = []
        except OSError as exc:
            raise StorageError(f"{directory}: cannot be listed ({type(exc).__name__}: {exc})") from exc
        self.list_calls += 1
        files: list[FileInfo] = []
        dirs: list[str] = []
        for entry in entries:
            name = entry["name"].rstrip("/")
            if not name.startswith(base + "/"):
                continue
            child = name[len(base) + 1 :]
            if "/" in child or not keep(child):
                continue
            if entry.get("type") == "directory":
                dirs.append(child)
            elif entry.get("type") == "file":
                files.append(FileInfo(f"{self.scheme}://{name}", int(entry.get("size") or 0), _mtime(entry)))
        return files, dirs

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        return delete_each(
            paths,
            max_concurrency,
            lambda path: self.fs.rm_file(self._name(path)),
            lambda exc: f"{type(exc).__name__}: {exc}",
        )

    # Conditional writes (index commits)

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        base = self._name(directory.rstrip("/"))
        try:
            entries = self.fs.ls(base, detail=True)
        except FileNotFoundError:
            return [], []
        names = [(e["name"].rstrip("/").rsplit("/", 1)[-1], e.get("type") == "directory") for e in entries]
        return [n for n, is_dir in names if not is_dir], [n for n, is_dir in names if is_dir]

    def create_exclusive(self, location: str, data: bytes) -> bool:
        try:
            with self.fs.open(self._name(location), "xb") as out:
                out.write(data)
        except FileExistsError:
            return False
        except ValueError as exc:  # the filesystem has no exclusive create
            raise InvalidInputError(
                f"{location}: the table's FileIO filesystem ({type(self.fs).__name__}) cannot create a file only if "
                f"none exists ({exc}), which index commits need"
            ) from exc
        return True

    def read(self, location: str) -> bytes:
        data: bytes = self.fs.cat_file(self._name(location))
        return data

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._name(location))


def _mtime(info: Mapping[str, Any]) -> datetime | None:
    """The modification time in an fsspec listing entry (``mtime`` or S3's ``LastModified``), in UTC."""
    value = info.get("mtime") or info.get("LastModified")
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return None


def _conforms(storage: FileIOStorage) -> Storage:
    """Never called: mypy checks here that the backend has every capability of ``Storage``."""
    return storage
