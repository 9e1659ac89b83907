"""Compact identities of paths: 64-bit hashes of the exact string and of its normalised parts.

A listed file matches a referenced one exactly when the exact hashes match; the path key and
the mapped scheme and authority find other spellings of the same file (to protect it) and
conflicts (same path, another bucket or authority).
"""

from __future__ import annotations

from collections.abc import Sequence

import mmh3
import pyarrow as pa

from airflow_iceberg_maint.locations import PathEquivalence, Uri

EMPTY = 0  # hash standing for "no scheme" / "no authority": matches any (as Iceberg Java)
HASH_SCHEMA = pa.schema(
    [("exact", pa.int64()), ("key", pa.int64()), ("scheme", pa.int64()), ("authority", pa.int64())]
)


def path_hash(text: str) -> int:
    return mmh3.hash64(text, signed=True)[0]  # stable across processes and runs, unlike hash()


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
        self._scopes: dict[str, tuple[int, int]] = {}

    def key(self, path: str) -> int:
        return self._key_and_scope(path)[0]

    def _key_and_scope(self, path: str) -> tuple[int, tuple[int, int]]:
        head = self._head
        if not (head and path.startswith(head) and path[len(head) : len(head) + 1] in ("/", "")):
            uri = Uri.parse(path)
            head = path[: len(path) - len(uri.path)]
            if head not in self._scopes:
                eq = self.equivalence
                self._scopes[head] = (
                    component_hash(eq.scheme(uri.scheme) if uri.scheme else ""),
                    component_hash(eq.authority(uri.authority)),
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
        for path in paths:
            key, (scheme, authority) = self._key_and_scope(path)
            exact.append(path_hash(path))
            keys.append(key)
            schemes.append(scheme)
            authorities.append(authority)
        columns = [pa.array(c, pa.int64()) for c in (exact, keys, schemes, authorities)]
        return pa.record_batch(columns, schema=HASH_SCHEMA)
