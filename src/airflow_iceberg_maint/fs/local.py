"""The local filesystem: listing, deletion, and the exclusive create of index commits."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

from airflow_iceberg_maint.fs.batches import delete_each
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.fs.storage import DeleteOutcome, FileInfo, KeepComponent, Storage


class LocalStorage:
    create_may_retry = False  # link() either makes the name or finds it taken: one answer, no retry

    def __init__(self) -> None:
        self.list_calls = 0

    def list_files(self, root: str, keep: KeepComponent) -> Iterator[FileInfo]:
        prefix = root.rstrip("/")
        base = local_path(prefix)
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                with os.scandir(os.path.join(base, rel) if rel else base) as entries:
                    self.list_calls += 1
                    for entry in entries:
                        # Symlinks are never followed nor deleted: they may lead out of the table.
                        if entry.is_symlink() or not keep(entry.name):
                            continue
                        child = f"{rel}/{entry.name}" if rel else entry.name
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(child)
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            yield FileInfo(
                                f"{prefix}/{child}",
                                st.st_size,
                                datetime.fromtimestamp(st.st_mtime, UTC),
                                (st.st_dev, st.st_ino),
                            )
            except FileNotFoundError:
                continue  # removed while listing; nothing under it to consider

    def list_level(self, directory: str, keep: KeepComponent) -> tuple[list[FileInfo], list[str]]:
        prefix = directory.rstrip("/")
        files: list[FileInfo] = []
        dirs: list[str] = []
        try:
            with os.scandir(local_path(prefix)) as entries:
                self.list_calls += 1
                for entry in entries:
                    if entry.is_symlink() or not keep(entry.name):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        mtime = datetime.fromtimestamp(st.st_mtime, UTC)
                        # The same record list_files makes of the file, its identity included.
                        files.append(FileInfo(f"{prefix}/{entry.name}", st.st_size, mtime, (st.st_dev, st.st_ino)))
        except FileNotFoundError:
            pass  # removed since it was listed: nothing under it to consider
        return files, dirs

    def delete_files(self, paths: Sequence[str], max_concurrency: int) -> DeleteOutcome:
        return delete_each(
            paths,
            max_concurrency,
            lambda path: os.remove(local_path(path)),
            lambda exc: f"{type(exc).__name__}: {exc.strerror or exc}",
        )

    # Conditional writes (index commits)

    def list_names(self, directory: str) -> tuple[list[str], list[str]]:
        try:
            with os.scandir(local_path(directory)) as entries:
                items = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        except FileNotFoundError:
            return [], []
        return [n for n, is_dir in items if not is_dir], [n for n, is_dir in items if is_dir]

    def create_exclusive(self, location: str, data: bytes) -> bool:
        path = local_path(location)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Write a private temporary file, then hard-link it into place: link() fails if the
        # name exists, and readers never see a partly written file.
        temporary = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(temporary, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(temporary)
        return True

    def read(self, location: str) -> bytes:
        with open(local_path(location), "rb") as f:
            return f.read()

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(local_path(location))


def _conforms(storage: LocalStorage) -> Storage:
    """Never called: mypy checks here that the backend has every capability of ``Storage``."""
    return storage
