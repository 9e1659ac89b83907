"""The set of files a table references, held compactly.

Every referenced path is kept as 64-bit hashes in Arrow arrays (about 32 bytes a path), not
as Python strings. A hash collision can only make a listed file look referenced (kept) or
look like a conflict (kept or reported): it never makes a file deletable.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.locations import PathEquivalence, Uri
from airflow_iceberg_maint.manifests import live_file_paths, manifest_paths

log = logging.getLogger(__name__)

#: Further sources of referenced paths, as "module:function"; each function takes the table
#: and yields batches of paths (S1: the files of the table's indexes).
REFERENCE_SOURCES: tuple[str, ...] = ("airflow_iceberg_maint.index.references:index_file_batches",)

ReferenceSource = Callable[[Table], Iterable[list[str]]]
_EMPTY = 0  # hash value standing for "no scheme" / "no authority": matches any (as Iceberg Java)
MANIFEST_READERS = 4


def _hash(text: str) -> int:
    return hash(text)


def _component_hash(text: str) -> int:
    if not text:
        return _EMPTY
    value = hash(text)
    return value if value != _EMPTY else 1


def load_reference_sources() -> list[ReferenceSource]:
    """Import every registered source; an import failure aborts the run (S2)."""
    sources: list[ReferenceSource] = []
    for spec in REFERENCE_SOURCES:
        module, _, func = spec.partition(":")
        try:
            sources.append(getattr(importlib.import_module(module), func))
        except (ImportError, AttributeError) as exc:
            raise MetadataReadError(f"reference source {spec!r}: cannot be loaded ({exc})") from exc
    return sources


class ReferencedSet:
    """Hashes of referenced paths: exact strings, and path keys with their scheme and authority."""

    def __init__(self, equivalence: PathEquivalence) -> None:
        self.equivalence = equivalence
        self._exact: list[pa.Array] = []
        self._keys: list[pa.RecordBatch] = []
        self._frozen_exact: pa.Array | None = None
        self._frozen_keys: pa.Table | None = None
        self._head = ""
        self._scopes: dict[str, tuple[int, int]] = {}
        self.added = 0

    def add(self, paths: list[str]) -> None:
        if not paths:
            return
        keys: list[int] = []
        schemes: list[int] = []
        authorities: list[int] = []
        for path in paths:
            key, scope = self._key_and_scope(path)
            keys.append(key)
            schemes.append(scope[0])
            authorities.append(scope[1])
        self._exact.append(pa.array([_hash(p) for p in paths], pa.int64()))
        self._keys.append(
            pa.record_batch(
                [pa.array(keys, pa.int64()), pa.array(schemes, pa.int64()), pa.array(authorities, pa.int64())],
                schema=_KEY_SCHEMA,
            )
        )
        self.added += len(paths)
        self._frozen_exact = self._frozen_keys = None

    def _key_and_scope(self, path: str) -> tuple[int, tuple[int, int]]:
        """Hash of the path key, and hashes of the mapped scheme and authority.

        Paths of one table nearly all share one ``scheme://authority`` head: it is parsed once.
        """
        head = self._head
        if not (head and path.startswith(head) and path[len(head) : len(head) + 1] in ("/", "")):
            uri = Uri.parse(path)
            head = path[: len(path) - len(uri.path)]
            if head not in self._scopes:
                eq = self.equivalence
                self._scopes[head] = (
                    _component_hash(eq.scheme(uri.scheme) if uri.scheme else ""),
                    _component_hash(eq.authority(uri.authority)),
                )
            self._head = head
        key = path[len(head) :]
        if "//" in key or key.endswith("/"):
            key = PathEquivalence.path_key(key)
        return _hash(key), self._scopes[head]

    def _freeze(self) -> tuple[pa.Array, pa.Table]:
        if self._frozen_exact is None or self._frozen_keys is None:
            exact = pc.unique(pa.chunked_array(self._exact, pa.int64()).combine_chunks())
            keys = pa.Table.from_batches(self._keys, schema=_KEY_SCHEMA)
            keys = keys.group_by(["key", "scheme", "authority"]).aggregate([])
            self._exact, self._keys = [exact], keys.to_batches()
            self._frozen_exact, self._frozen_keys = exact, keys
        return self._frozen_exact, self._frozen_keys

    def __len__(self) -> int:
        return len(self._freeze()[0])

    @property
    def nbytes(self) -> int:
        exact, keys = self._freeze()
        return exact.nbytes + keys.nbytes

    def contains_exact(self, paths: list[str]) -> list[bool]:
        exact, _ = self._freeze()
        hashes = pa.array([_hash(p) for p in paths], pa.int64())
        return pc.is_in(hashes, value_set=exact).to_pylist()

    def classify_unmatched(self, paths: list[str]) -> dict[str, str]:
        """For paths not referenced exactly: ``equivalent`` (same file, other spelling) or ``conflict``.

        Paths absent from the result share no path key with any referenced path.
        """
        if not paths:
            return {}
        eq = self.equivalence
        _, keys = self._freeze()
        path_keys = [_hash(eq.path_key(p)) for p in paths]  # the same value _key_and_scope computes
        hits = keys.filter(pc.is_in(keys["key"], value_set=pa.array(path_keys, pa.int64())))
        scopes: dict[int, list[tuple[int, int]]] = {}
        for key, scheme, authority in zip(*(hits[c].to_pylist() for c in ("key", "scheme", "authority")), strict=True):
            scopes.setdefault(key, []).append((scheme, authority))
        result: dict[str, str] = {}
        for path, key in zip(paths, path_keys, strict=True):
            if key not in scopes:
                continue
            uri = Uri.parse(path)
            mine = (_component_hash(eq.scheme(uri.scheme)), _component_hash(eq.authority(uri.authority)))
            same = any(s in (_EMPTY, mine[0]) and a in (_EMPTY, mine[1]) for s, a in scopes[key])
            result[path] = "equivalent" if same else "conflict"
        return result


_KEY_SCHEMA = pa.schema([("key", pa.int64()), ("scheme", pa.int64()), ("authority", pa.int64())])


@dataclass
class ReferenceWalk:
    """What a walk of table metadata read: counts for the report, and manifests already read."""

    snapshots: int = 0
    manifests_read: int = 0


def metadata_level_paths(metadata: TableMetadata, metadata_location: str) -> list[str]:
    """Metadata files, the version hint, and statistics files of the current metadata."""
    paths = [metadata_location, f"{metadata.location.rstrip('/')}/metadata/version-hint.text"]
    paths.extend(entry.metadata_file for entry in metadata.metadata_log)
    paths.extend(stat.statistics_path for stat in metadata.statistics)
    paths.extend(stat.statistics_path for stat in metadata.partition_statistics)
    return paths


def snapshot_path_batches(
    table: Table,
    metadata: TableMetadata,
    seen_manifests: set[str],
    walk: ReferenceWalk,
    skip_snapshots: frozenset[int] = frozenset(),
) -> Iterator[list[str]]:
    """Manifest lists, manifests and live content files of every snapshot (branches, tags, staged).

    Each unique manifest is read once across calls (``seen_manifests``), on a few threads.
    """
    io = table.io
    snapshots = [s for s in metadata.snapshots if s.snapshot_id not in skip_snapshots]
    walk.snapshots += len(snapshots)
    lists = [s.manifest_list for s in snapshots if s.manifest_list]
    yield lists
    with ThreadPoolExecutor(max_workers=MANIFEST_READERS) as pool:
        fresh: dict[str, None] = {}
        for manifests in pool.map(lambda ml: manifest_paths(io, ml), lists):
            fresh.update((m, None) for m in manifests if m not in seen_manifests)
        seen_manifests.update(fresh)
        yield list(fresh)
        for paths in pool.map(lambda m: live_file_paths(io, m), fresh):
            walk.manifests_read += 1
            yield paths


def source_path_batches(table: Table, sources: Iterable[ReferenceSource]) -> Iterator[list[str]]:
    """Paths from plugged-in sources (indexes); any failure aborts (S2)."""
    for source in sources:
        try:
            yield from source(table)
        except MetadataReadError:
            raise
        except Exception as exc:
            raise MetadataReadError(f"reference source {source.__module__}: failed ({exc})") from exc
