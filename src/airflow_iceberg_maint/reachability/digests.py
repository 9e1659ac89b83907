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

from airflow_iceberg_maint.reachability import digest_deltas
from airflow_iceberg_maint.reachability.digest_deltas import Entries

if TYPE_CHECKING:
    from pyiceberg.io import FileIO

log = logging.getLogger(__name__)

PROPERTY = "airflow-iceberg-maint.digest-cache"  # a FileIO property pyiceberg ignores
DEFAULT = ":default:"  # the API's and the command line's default: ``default_location()``
_HEADER_READ = 16 * 1024  # bytes of a file's start read for its identity; doubled while the header runs past
_MAX_HEADER = 16 * 1024 * 1024

#: Days a digest is kept after the last run that used it.
MAX_AGE_DAYS = 30
_PRUNE_EVERY_SECONDS = 24 * 3600
_PRUNED_MARKER = "last-pruned"  # its modification time says when
_OWN_FILE = re.compile(r"[0-9a-f]{64}\.(?:list|manifest)|\.tmp-\w+")

_BASES = digest_deltas.Bases()  # this process's full list digests, to build deltas on and read them over

#: (length, sync marker): with the path, what makes a file the one a digest was made from.
Identity = tuple[int, bytes]


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

    def file(self, kind: str, path: str) -> str:
        """Where the digest of ``path`` is (a string: a warm run names thousands, and a ``Path`` costs more)."""
        key = hashlib.sha256(f"{kind}\0{path}".encode()).hexdigest()
        return f"{self.folder}/{key[:2]}/{key}.{kind}"

    def read(self, kind: str, path: str) -> tuple[Identity, Entries] | None:
        """The identity and entries stored for ``path``; None when absent, corrupt or unreadable,
        or a delta whose base is (``digest_deltas``)."""
        try:
            head, entries, runs, checksum = self._parsed(kind, path)
            if runs is None:
                if kind == "list":
                    _BASES.put(self.folder, path, checksum, entries)
                return (head[3], bytes.fromhex(head[4])), entries
            base_path, base_checksum = head[5]
            base = _BASES.get(self.folder, base_path, base_checksum) or self._base(base_path, base_checksum)
            if base is None:
                log.info("digest cache: the base of the digest of %s is gone; reading the file", path)
                return None
            return (head[3], bytes.fromhex(head[4])), digest_deltas.apply(base, runs, entries)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("digest cache: cannot read the digest of %s (%s); reading the file", path, exc)
            return None
        except Exception as exc:  # whatever its content (a checksum proves who wrote it, not that it is sane)
            log.warning("digest cache: ignoring the digest of %s (%s); reading the file", path, exc)
            return None

    def _base(self, path: str, checksum: str) -> Entries | None:
        """The full list digest of ``path`` when its checksum is ``checksum`` (touched: in use), else None."""
        try:
            _, entries, runs, found = self._parsed("list", path)
        except FileNotFoundError:
            return None
        if runs is not None or found != checksum:
            return None
        _BASES.put(self.folder, path, checksum, entries)
        self.touch("list", path)
        return entries

    def _parsed(self, kind: str, path: str) -> tuple[list[Any], Entries, list[Any] | None, str]:
        """A digest's head, its entries (a delta's own), a delta's layout (else None), and its checksum.

        Raises OSError when it cannot be read, another exception (ValueError mostly) when it is
        not a digest of ``path`` written by this version.
        """
        with open(self.file(kind, path), "rb") as f:
            data = f.read()
        body, _, trailer = data.rstrip(b"\n").rpartition(b"\n")
        checksum = hashlib.sha256(body).hexdigest()
        if trailer != checksum.encode():
            raise ValueError("its checksum does not match its content")
        # One parse of the lines as an array (JSON escapes every newline in a string): a warm run reads thousands.
        head, *columns = json.loads(b"[" + body.replace(b"\n", b",") + b"]")
        # Version 1: [1, kind, path, length, sync]; version 2, a delta: the same and [base path, base checksum].
        if not isinstance(head, list) or head[:5] != [len(head) - 4, kind, path, head[3], head[4]]:
            raise ValueError("it is another file's or another version's")
        if not isinstance(head[3], int):
            raise ValueError("it is another file's or another version's")
        full = len(head) == 5 and len(columns) == 2
        delta = len(head) == 6 and kind == "list" and len(columns) == 3 and _is_base_ref(head[5])
        if not (full or delta):
            raise ValueError("it is another file's or another version's")
        paths, sizes = columns[:2]
        # Types checked in C (map), not an entry at a time: decoding a warm table's digests is the cost left.
        if not (isinstance(paths, list) and isinstance(sizes, list) and len(paths) == len(sizes)):
            raise ValueError("its paths and sizes do not pair up")
        if not set(map(type, paths)) <= {str} or not set(map(type, sizes)) <= {int}:
            raise ValueError("an entry is not a path with a size")
        if full:
            return head, (paths, sizes), None, checksum
        if not isinstance(columns[2], list):
            raise ValueError("its layout is not a list")
        return head, (paths, sizes), columns[2], checksum

    def write(self, kind: str, path: str, identity: Identity, entries: Entries) -> None:
        """Store a digest: written whole to a temporary name, then renamed. An error is logged, never raised.

        A list's digest is stored as a delta over the last full list digest this process met
        when that is much smaller (``digest_deltas``).
        """
        head: list[Any] = [1, kind, path, identity[0], identity[1].hex()]
        columns: list[Any] = list(entries)
        base = _BASES.latest(self.folder) if kind == "list" else None
        if base is not None and base[0] != path:
            runs, own = digest_deltas.layout(base[2], entries)
            if digest_deltas.worth_it(own, entries) and digest_deltas.apply(base[2], runs, own) == entries:
                head = [2, kind, path, identity[0], identity[1].hex(), [base[0], base[1]]]
                columns = [*own, runs]
        body = "\n".join(json.dumps(line) for line in [head, *columns]).encode()
        checksum = hashlib.sha256(body).hexdigest()
        target = self.file(kind, path)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(body + b"\n" + checksum.encode() + b"\n")
                os.replace(temp, target)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            log.warning("digest cache: cannot store the digest of %s (%s)", path, exc)
            return
        if kind == "list" and len(head) == 5:
            _BASES.put(self.folder, path, checksum, entries)
        elif kind == "list":  # its full digest, if held, is no longer on disk: no delta may name it
            _BASES.drop(self.folder, path)

    def touch(self, kind: str, path: str) -> None:
        """Mark a digest used now, so that pruning keeps it another ``MAX_AGE_DAYS``."""
        with contextlib.suppress(OSError):  # at worst pruned early: the file is read again
            os.utime(self.file(kind, path))

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


def _is_base_ref(ref: Any) -> bool:
    return isinstance(ref, list) and len(ref) == 2 and all(isinstance(part, str) for part in ref)


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
