"""Compact identities of paths: 64-bit hashes of the exact bytes and of the normalised parts (S4).

A listed file matches a referenced one exactly when the exact hashes match; the path key and
the mapped scheme and authority find other spellings of the same file (to protect it) and
conflicts (same path, another bucket or authority). On local storage a referenced path also
carries the identity (device, inode) of the file it names, so that spellings no string rule
sees (symlinks, ``.`` and ``..``, another mount of the same directory) still protect the file.
A referenced path that the listing can name verbatim is not ``stat``-ed: its identity is
DEFERRED and later taken from the listed file with the same 128-bit hash (see
``ReferencedSet.resolve``), so a scan pays one ``stat`` a file, in the listing.

Strings are hashed as their exact bytes: a name listed from a local directory that is not
UTF-8 arrives surrogate-escaped and is hashed as the bytes on disk (never passed to mmh3 as
a string it cannot encode).
"""

from __future__ import annotations

import os
import re
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import repeat, starmap
from operator import itemgetter

import mmh3
import pyarrow as pa
import pyarrow.compute as pc

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri

EMPTY = 0  # hash standing for "no scheme" / "no authority": matches any (as Iceberg Java)
DEFERRED = 1  # identity of a referenced path the listing may name verbatim: resolved from the listing
HASH_SCHEMA = pa.schema(
    [
        ("exact", pa.int64()),
        ("key", pa.int64()),
        ("scheme", pa.int64()),
        ("authority", pa.int64()),
        ("identity", pa.int64()),  # EMPTY off local storage, or when no file exists at the path
        ("check", pa.int64()),  # the exact hash's other 64 bits, for DEFERRED rows (EMPTY otherwise)
    ]
)
LISTED_SCHEMA = pa.schema([("exact", pa.int64()), ("check", pa.int64()), ("identity", pa.int64())])
_MISSING = (FileNotFoundError, NotADirectoryError)
_RESERVED = pa.array([EMPTY, DEFERRED], pa.int64())
_SEPARATOR = "\0"  # joins many names into one string, so one search in C checks them all
# In joined path keys: one that ``PathEquivalence.path_key`` would change ("//", a trailing "/", a "."
# or ".." segment, a "%" it would decode).
_NOT_A_KEY = re.compile("//|/\0|/\\.\\.?[/\0]|%")
# In joined names below the scan root: one a listing never yields (hidden, "//", empty, trailing "/").
_NOT_LISTABLE = re.compile("\0[./_\0]|/[./_\0]")
_pack_inode = struct.Struct("<QQ").pack


# The bytes a path string stands for; a surrogate-escaped local name gets its bytes on disk back.
# A partial of a C method, so that ``map`` over many paths runs no Python bytecode a path.
exact_bytes = partial(str.encode, encoding="utf-8", errors="surrogateescape")


def int64_array(values: Sequence[int]) -> pa.Array:
    """An Arrow int64 array; an ``array("q")`` is taken as it is (``pa.array`` would walk it value by value)."""
    if isinstance(values, array) and values.typecode == "q":
        return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
    return pa.array(values, pa.int64())


def constant_array(value: int, length: int) -> pa.Array:
    return int64_array(array("q", [value]) * length)


def hash_halves(keys: Iterable[bytes | str]) -> tuple[array[int], array[int]]:
    """murmur3's 128-bit hash of each key (a string as UTF-8) as two signed 64-bit halves, hashed in C.

    ``map`` over C functions runs no Python bytecode a key. A string must be ASCII or valid
    Unicode: mmh3 (5.3) crashes the interpreter on a lone surrogate instead of raising.
    """
    halves = array("q")
    halves.frombytes(b"".join(map(mmh3.hash_bytes, keys)))
    if sys.byteorder == "big":
        halves.byteswap()  # mmh3 writes each half little-endian
    return halves[0::2], halves[1::2]


def path_hashes128(paths: Sequence[str]) -> tuple[array[int], array[int]]:
    """``path_hash128`` of each path: the first halves are the ``path_hash`` of each."""
    if all(map(str.isascii, paths)):
        return hash_halves(paths)
    return hash_halves(map(exact_bytes, paths))  # a surrogate-escaped local name is hashed as its bytes on disk


def inode_identities(inodes: Iterable[tuple[int, int]]) -> pa.Array:
    """``inode_identity`` of each (device, inode) pair."""
    values = int64_array(hash_halves(starmap(_pack_inode, inodes))[0])
    return pc.if_else(pc.is_in(values, value_set=_RESERVED), 2, values)


def path_hash(text: str) -> int:
    return mmh3.hash64(exact_bytes(text), signed=True)[0]  # stable across processes and runs, unlike hash()


def path_hash128(text: str) -> tuple[int, int]:
    """The exact hash and its other 64 bits (murmur3's 128-bit hash): ``path_hash`` is the first."""
    return mmh3.hash64(exact_bytes(text), signed=True)


def inode_identity(device: int, inode: int) -> int:
    value = mmh3.hash64(_pack_inode(device, inode), signed=True)[0]
    return value if value not in (EMPTY, DEFERRED) else 2


def _identity_hash(st: os.stat_result) -> int:
    return inode_identity(st.st_dev, st.st_ino)


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
    With ``listed_under`` (the scan root), a local path below it that a listing can name
    verbatim gets the identity DEFERRED and its 128-bit hash instead of a ``stat``.
    """

    def __init__(self, equivalence: PathEquivalence, listed_under: str | None = None) -> None:
        self.equivalence = equivalence
        self._head = ""
        self._scopes: dict[str, tuple[int, int, str | None]] = {}
        self._under = listed_under.rstrip("/") + "/" if listed_under else None

    def key(self, path: str) -> int:
        return self._key_and_scope(path)[0]

    def key_and_local(self, path: str) -> tuple[int, bool]:
        """The path key's hash, and whether the path is on local storage."""
        key, scope = self._key_and_scope(path)
        return key, scope[2] is not None

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
        if "//" in key or "/." in key or "%" in key or key.endswith("/") or not key.startswith("/"):
            key = PathEquivalence.path_key(key)
        return path_hash(key), self._scopes[head]

    def identity(self, path: str) -> int:
        """``named_identity`` of a local path (EMPTY for a path on another store)."""
        local_prefix = self._key_and_scope(path)[1][2]
        return EMPTY if local_prefix is None else named_identity(local_prefix + path[len(self._head) :])

    def _listable(self, path: str) -> bool:
        """Whether a listing of the scan root may yield exactly this string (a regular name below it)."""
        under = self._under
        if under is None or not path.startswith(under):
            return False
        rest = path[len(under) :]  # the listing skips hidden names, and never yields "//", "." or ".."
        return not (rest.startswith((".", "_")) or "/." in rest or "/_" in rest or "//" in rest)

    def batch(self, paths: Sequence[str]) -> pa.RecordBatch:
        uniform = self._uniform_batch(paths)
        return uniform if uniform is not None else self._batch_each(paths)

    def key_hashes(self, paths: Sequence[str]) -> tuple[Sequence[int], Sequence[bool]]:
        """``key_and_local`` of each path, hashed in C when the paths share the cached head."""
        uniform = self._uniform_keys(paths)
        if uniform is None:
            pairs = [self.key_and_local(p) for p in paths]
            return [k for k, _ in pairs], [local for _, local in pairs]
        keys, (_, _, local_prefix) = uniform
        return path_hashes128(keys)[0], [local_prefix is not None] * len(paths)

    def _uniform_keys(self, paths: Sequence[str]) -> tuple[list[str], tuple[int, int, str | None]] | None:
        """The path keys, and the head's scope, of paths that all have the cached head and keys as written.

        None when any path has another head or a key ``PathEquivalence.path_key`` would change;
        the keys are checked by one search of them joined (a false alarm only costs the slow path).
        """
        if not paths:
            return None
        scope = self._key_and_scope(paths[0])[1]
        head = self._head
        if not all(map(str.startswith, paths, repeat(head + "/"))):
            return None
        keys = list(map(itemgetter(slice(len(head), None)), paths))
        if _NOT_A_KEY.search(_SEPARATOR.join(keys) + _SEPARATOR):
            return None
        return keys, scope

    def _uniform_batch(self, paths: Sequence[str]) -> pa.RecordBatch | None:
        """The batch hashed in C, when the keys are uniform and on local storage every path is listable.

        Then every identity is DEFERRED (no ``stat``); without a listing (``listed_under`` None:
        snapshot expiry) every local identity is ``stat``-ed, as ``_batch_each`` does. Otherwise
        None, and each path goes through ``_batch_each``.
        """
        uniform = self._uniform_keys(paths)
        if uniform is None:
            return None
        keys, (scheme, authority, local_prefix) = uniform
        deferred = local_prefix is not None and self._under is not None
        if deferred and not self._all_listable(paths):
            return None
        count = len(paths)
        exact, check = path_hashes128(paths)
        if local_prefix is None:
            identities = constant_array(EMPTY, count)
        elif deferred:
            identities = constant_array(DEFERRED, count)
        else:
            identities = pa.array([named_identity(local_prefix + key) for key in keys], pa.int64())
        columns = [
            int64_array(exact),
            int64_array(path_hashes128(keys)[0]),
            constant_array(scheme, count),
            constant_array(authority, count),
            identities,
            int64_array(check) if deferred else constant_array(EMPTY, count),
        ]
        return pa.record_batch(columns, schema=HASH_SCHEMA)

    def _all_listable(self, paths: Sequence[str]) -> bool:
        """``_listable`` of every path, checked by one search of the names below the root joined."""
        under = self._under
        if under is None or not all(map(str.startswith, paths, repeat(under))):
            return False
        rests = _SEPARATOR.join(map(itemgetter(slice(len(under), None)), paths))
        return not _NOT_LISTABLE.search(_SEPARATOR + rests + _SEPARATOR)

    def _batch_each(self, paths: Sequence[str]) -> pa.RecordBatch:
        exact: list[int] = []
        keys: list[int] = []
        schemes: list[int] = []
        authorities: list[int] = []
        identities: list[int] = []
        checks: list[int] = []
        for path in paths:
            key, (scheme, authority, local_prefix) = self._key_and_scope(path)
            keys.append(key)
            schemes.append(scheme)
            authorities.append(authority)
            if local_prefix is not None and self._listable(path):
                first, second = path_hash128(path)
                exact.append(first)
                checks.append(second)
                identities.append(DEFERRED)
                continue
            exact.append(path_hash(path))
            checks.append(EMPTY)
            identities.append(EMPTY if local_prefix is None else named_identity(local_prefix + path[len(self._head) :]))
        columns = [pa.array(c, pa.int64()) for c in (exact, keys, schemes, authorities, identities, checks)]
        return pa.record_batch(columns, schema=HASH_SCHEMA)
