"""The store of digests: what a manifest list or manifest names, kept across runs (S22).

A committed manifest list or manifest never changes (the spec: writers never rewrite one in
place), so what it names can be read once and reused. A digest holds it with the file's
identity (path, length, and the Avro container's 16-byte sync marker, random per file); it is
used only when the file's identity read now (its length and a small read of its header) matches.
Everything else fails closed: a missing, corrupt, partial or mismatched digest, or any error of
the store, means the file itself is read (and a cache error never fails the run). Only
manifest lists and manifests are stored: never a metadata.json, nor anything a writer changes.

Digests no run has used for ``MAX_AGE_DAYS`` (those of expired snapshots, rewritten manifests and
dropped tables) are removed: a run touches each digest it uses, and a run opening the store prunes
it when the last pruning is a day old. Only the store's own files are removed (their names are
the hashes it gives them, in the subfolders it makes); losing a digest costs a read, nothing else.

The store is a local folder; its location travels with the table's ``FileIO`` as a property,
so decoding worker processes use it too (``attach``). Stdlib only: the command line's parsers
import ``default_location``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

log = logging.getLogger(__name__)

PROPERTY = "airflow-iceberg-maint.digest-cache"  # a FileIO property pyiceberg ignores
DEFAULT = ":default:"  # the API's and the command line's default: ``default_location()``
_VERSION = 1
_HEADER_READ = 16 * 1024  # bytes of a file's start read for its identity; doubled while the header runs past
_MAX_HEADER = 16 * 1024 * 1024

#: Days a digest is kept after the last run that used it.
MAX_AGE_DAYS = 30
_PRUNE_EVERY_SECONDS = 24 * 3600
_PRUNED_MARKER = "last-pruned"  # its modification time says when
_OWN_FILE = re.compile(r"[0-9a-f]{64}\.(?:list|manifest)|\.tmp-\w+")

#: (length, sync marker): with the path, what makes a file the one a digest was made from.
Identity = tuple[int, bytes]
#: What a file names: paths, and the size of each (a manifest's length, a content file's size).
Entries = tuple[list[str], list[int]]


def default_location() -> str:
    """``digests`` beside the state store's SQLite file, else under the user's state directory."""
    url = os.environ.get("ICEBERG_MAINT_STATE_URL", "")
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return str(Path(url[len("sqlite:///") :]).parent / "digests")
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return str(base / "iceberg-maint" / "digests")


def resolve(cache: str | None) -> str | None:
    """The folder a ``cache`` option names (``DEFAULT``: the default location; ``file://`` URIs too), or None."""
    if cache is None:
        return None
    if cache == DEFAULT:
        return default_location()
    return cache[len("file://") :] if cache.startswith("file://") else cache


def check_location(cache: str | None) -> str:
    """An error's text if ``cache`` cannot name a local folder, else ''."""
    if cache is None or cache == DEFAULT:
        return ""
    folder = resolve(cache) or ""
    if not folder or "://" in folder:
        return f"cache location {cache!r}: expected a local folder or a file:// URI"
    return ""


@dataclass(frozen=True)
class DigestStore:
    """Digests under ``folder``, one file a (kind, path)."""

    folder: str

    @staticmethod
    def of(io: FileIO) -> DigestStore | None:
        folder = io.properties.get(PROPERTY)
        return DigestStore(folder) if folder else None

    def attach(self, io: FileIO) -> FileIO:
        """A copy of ``io`` whose reads of manifest lists and manifests use this store."""
        attached = copy.copy(io)
        attached.properties = {**io.properties, PROPERTY: self.folder}
        return attached

    def _file(self, kind: str, path: str) -> Path:
        key = hashlib.sha256(f"{kind}\0{path}".encode()).hexdigest()
        return Path(self.folder) / key[:2] / f"{key}.{kind}"

    def read(self, kind: str, path: str) -> tuple[Identity, Entries] | None:
        """The identity and entries stored for ``path``; None when absent, corrupt or unreadable."""
        try:
            data = self._file(kind, path).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("digest cache: cannot read the digest of %s (%s); reading the file", path, exc)
            return None
        try:
            body, _, trailer = data.rstrip(b"\n").rpartition(b"\n")
            if trailer != hashlib.sha256(body).hexdigest().encode():
                raise ValueError("its checksum does not match its content")
            head, paths, sizes = (json.loads(line) for line in body.split(b"\n"))
            if head != [_VERSION, kind, path, head[3], head[4]] or not isinstance(head[3], int):
                raise ValueError("it is another file's or another version's")
            # Types checked in C (map), not an entry at a time: decoding a warm table's digests is the cost left.
            if not (isinstance(paths, list) and isinstance(sizes, list) and len(paths) == len(sizes)):
                raise ValueError("its paths and sizes do not pair up")
            if not set(map(type, paths)) <= {str} or not set(map(type, sizes)) <= {int}:
                raise ValueError("an entry is not a path with a size")
            return (head[3], bytes.fromhex(head[4])), (paths, sizes)
        except (ValueError, TypeError, IndexError) as exc:
            log.warning("digest cache: ignoring the digest of %s (%s); reading the file", path, exc)
            return None

    def write(self, kind: str, path: str, identity: Identity, entries: Entries) -> None:
        """Store a digest: written whole to a temporary name, then renamed. An error is logged, never raised."""
        target = self._file(kind, path)
        lines = [json.dumps([_VERSION, kind, path, identity[0], identity[1].hex()])]
        lines.extend(json.dumps(column) for column in entries)
        body = "\n".join(lines).encode()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n")
                os.replace(temp, target)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("digest cache: cannot store the digest of %s (%s)", path, exc)

    def touch(self, kind: str, path: str) -> None:
        """Mark a digest used now, so that pruning keeps it another ``MAX_AGE_DAYS``."""
        with contextlib.suppress(OSError):  # at worst pruned early: the file is read again
            os.utime(self._file(kind, path))

    def prune(self, max_age_days: float = MAX_AGE_DAYS) -> int:
        """Remove the store's digests (and temporary files of killed writers) unused for ``max_age_days``;
        returns how many. Files the store did not name itself are never touched."""
        cutoff = time.time() - max_age_days * 24 * 3600
        removed = 0
        if not os.path.isdir(self.folder):
            return 0
        for sub in os.scandir(self.folder):
            if not (sub.is_dir(follow_symlinks=False) and re.fullmatch(r"[0-9a-f]{2}", sub.name)):
                continue
            for entry in os.scandir(sub.path):
                own = _OWN_FILE.fullmatch(entry.name) and (entry.name.startswith(".") or entry.name[:2] == sub.name)
                if own and entry.is_file(follow_symlinks=False) and _unused_since(entry, cutoff):
                    Path(entry.path).unlink(missing_ok=True)
                    removed += 1
        return removed

    def prune_if_due(self) -> None:
        """``prune`` when the store was last pruned a day ago or more (never: now). Errors are logged."""
        marker = Path(self.folder) / _PRUNED_MARKER
        try:
            if time.time() - marker.stat().st_mtime < _PRUNE_EVERY_SECONDS:
                return
        except FileNotFoundError:
            pass
        except OSError:
            return
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            removed = self.prune()
        except OSError as exc:
            log.warning("digest cache: cannot prune %s (%s)", self.folder, exc)
            return
        if removed:
            log.info("digest cache: removed %d digests unused for %d days from %s", removed, MAX_AGE_DAYS, self.folder)


def _unused_since(entry: os.DirEntry[str], cutoff: float) -> bool:
    """Last used before ``cutoff``; a file gone meanwhile (another run pruned or replaced it) is not."""
    try:
        return entry.stat(follow_symlinks=False).st_mtime < cutoff
    except FileNotFoundError:
        return False


def through_cache(io: FileIO, cache: str | None) -> FileIO:
    """``io``, reading manifest lists and manifests through the store at ``cache`` when there is one
    (pruned first when due)."""
    if not cache:
        return io
    store = DigestStore(cache)
    store.prune_if_due()
    return store.attach(io)


def identity(io: FileIO, path: str, header: Any) -> Identity:
    """The file's length and sync marker: its size, and a small read of its start (more while the header runs past).

    ``header(data)`` returns the sync marker of a file starting with ``data``, or raises when
    ``data`` ends inside the header.
    """
    input_file = io.new_input(path)
    length = len(input_file)
    size = _HEADER_READ
    with input_file.open() as f:
        while True:
            data = f.read(min(size, length))
            try:
                return length, header(data)
            except Exception:
                if size >= min(length, _MAX_HEADER):
                    raise
                size *= 4
                f.seek(0)
