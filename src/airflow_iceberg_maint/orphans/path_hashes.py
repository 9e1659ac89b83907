"""Compact identities of paths: 64-bit hashes of the exact bytes and of the normalised parts (S4).

A listed file matches a referenced one exactly when the exact hashes match; the path key and
the mapped scheme and authority find other spellings of the same file (to protect it) and
conflicts (same path, another bucket or authority). On local storage a referenced path also
carries the identity (device, inode) of the file it names, so that spellings no string rule
sees (symlinks, ``.`` and ``..``, another mount of the same directory) still protect the file.

Strings are hashed as their exact bytes: a name listed from a local directory that is not
UTF-8 arrives surrogate-escaped and is hashed as the bytes on disk (never passed to mmh3 as
a string it cannot encode).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import mmh3
import pyarrow as pa

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri

EMPTY = 0  # hash standing for "no scheme" / "no authority": matches any (as Iceberg Java)
HASH_SCHEMA = pa.schema(
    [
        ("exact", pa.int64()),
        ("key", pa.int64()),
        ("scheme", pa.int64()),
        ("authority", pa.int64()),
        ("identity", pa.int64()),  # EMPTY off local storage, or when no file exists at the path
    ]
)
_MISSING = (FileNotFoundError, NotADirectoryError)


def exact_bytes(text: str) -> bytes:
    """The bytes a path string stands for; a surrogate-escaped local name gets its bytes on disk back."""
    return text.encode("utf-8", "surrogateescape")


def path_hash(text: str) -> int:
    return mmh3.hash64(exact_bytes(text), signed=True)[0]  # stable across processes and runs, unlike hash()


def _identity_hash(st: os.stat_result) -> int:
    value = mmh3.hash64(struct.pack("<QQ", st.st_dev, st.st_ino), signed=True)[0]
    return value if value != EMPTY else 1


def named_identity(local: str) -> int:
    """Identity of the file a referenced local path names, symlinks followed; EMPTY when none exists.

    Any other error (a directory that cannot be searched) aborts the run (S2): the path might
    name a listed file, and nobody can tell.
    """
    try:
        return _identity_hash(os.stat(local))
    except _MISSING:
        return EMPTY
    except OSError as exc:
        raise MetadataReadError(f"referenced file {local!r}: cannot be checked on disk ({exc})") from exc


def listed_identity(local: str) -> int:
    """Identity of a listed local file itself (a symlink is not followed); EMPTY when it is gone."""
    try:
        return _identity_hash(os.stat(local, follow_symlinks=False))
    except _MISSING:
        return EMPTY


def component_hash(text: str) -> int:
    if not text:
        return EMPTY
    value = path_hash(text)
    return value if value != EMPTY else 1


class PathHasher:
    """Hashes a path's exact string, its path key, and its mapped scheme and authority.

    Paths of one table nearly all share one ``scheme://authority`` head: it is parsed once.
    """

    def __init__(self, equivalence: PathEquivalence) -> None:
        self.equivalence = equivalence
        self._head = ""
        self._scopes: dict[str, tuple[int, int, str | None]] = {}

    def key(self, path: str) -> int:
        return self._key_and_scope(path)[0]

    def _key_and_scope(self, path: str) -> tuple[int, tuple[int, int, str | None]]:
        """The path key's hash, and the head's (scheme hash, authority hash, local filesystem prefix or None)."""
        head = self._head
        if not (head and path.startswith(head) and path[len(head) : len(head) + 1] in ("/", "")):
            uri = Uri.parse(path)
            head = path[: len(path) - len(uri.path)]
            if head not in self._scopes:
                eq = self.equivalence
                self._scopes[head] = (
                    component_hash(eq.scheme(uri.scheme) if uri.scheme else ""),
                    component_hash(eq.authority(uri.authority)),
                    # pyiceberg opens file://host/p as host/p: the authority belongs to the path.
                    uri.authority if uri.is_local else None,
                )
            self._head = head
        key = path[len(head) :]
        if "//" in key or key.endswith("/"):
            key = PathEquivalence.path_key(key)
        return path_hash(key), self._scopes[head]

    def batch(self, paths: Sequence[str]) -> pa.RecordBatch:
        exact: list[int] = []
        keys: list[int] = []
        schemes: list[int] = []
        authorities: list[int] = []
        identities: list[int] = []
        for path in paths:
            key, (scheme, authority, local_prefix) = self._key_and_scope(path)
            exact.append(path_hash(path))
            keys.append(key)
            schemes.append(scheme)
            authorities.append(authority)
            identities.append(EMPTY if local_prefix is None else named_identity(local_prefix + path[len(self._head) :]))
        columns = [pa.array(c, pa.int64()) for c in (exact, keys, schemes, authorities, identities)]
        return pa.record_batch(columns, schema=HASH_SCHEMA)
