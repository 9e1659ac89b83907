"""The set of files a table references, held compactly (``reference_walk`` fills it).

Every referenced path is kept as 64-bit hashes in Arrow arrays (32 bytes a path, 40 on local
storage), not as Python strings. A hash collision can only make a listed file look referenced
(kept) or look like a conflict (kept or reported): it never makes a file deletable.

"""

from __future__ import annotations

import logging
import sys
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO

from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri, local_path
from airflow_iceberg_maint.reachability.manifests import live_file_paths
from airflow_iceberg_maint.reachability.path_hashes import (
    DEFERRED,
    EMPTY,
    HASH_SCHEMA,
    PathHasher,
    component_hash,
    inode_identities,
    inode_identity,
    int64_array,
    listed_identity,
    path_hash128,
    path_hashes128,
)
from airflow_iceberg_maint.reachability.referenced_runs import (
    DEFERRED_SCHEMA,
    ResolvedIdentities,
    SpilledReferences,
    first_listed,
    hash_runs,
)
from airflow_iceberg_maint.sorting.sorted_runs import SortedRuns

log = logging.getLogger(__name__)
_DEFERRED_PREFIX = "iceberg-orphan-deferred-"
_NARROW_STEP = 50_000  # paths hashed together by ``narrowed_for``

Reread = Callable[[], Iterable[str]]  # the paths a batch of hashes was made of, read again


def given_paths(paths: list[str]) -> Reread:
    return lambda: paths


def manifest_rereads(io: FileIO, manifests: list[str]) -> Reread:
    return lambda: (p for m in manifests for p in live_file_paths(io, m))


class ReferencedSet:
    """Hashes of referenced paths: exact strings, path keys with their scheme and authority, file identities."""

    def __init__(
        self, equivalence: PathEquivalence, budget_bytes: int | None = None, spill_dir: str | None = None
    ) -> None:
        """``budget_bytes``: hashed paths held before they all go to sorted runs on disk (None: never).

        Deferred paths (``add_hashes`` with a ``reread``) go to sorted runs of their own within a
        quarter of it, until ``resolve``; so do the identities it finds for them, once the set is spilled.
        """
        self.hasher = PathHasher(equivalence)
        self.budget_bytes, self.spill_dir = budget_bytes, spill_dir
        self.spilled: SpilledReferences | None = None
        self._batches: list[pa.RecordBatch] = []
        self._batched_bytes = 0
        self._frozen: tuple[pa.Array, pa.Table, pa.Array] | None = None
        self._deferred: SortedRuns | None = None  # DEFERRED_SCHEMA rows of paths with DEFERRED identities
        self._rereads: list[tuple[int, Reread]] = []  # the deferred rows of each batch end before the first
        self._deferred_rows = 0
        self._resolved: list[pa.Array] = []  # their identities, once resolved (in memory)
        self._resolved_runs: ResolvedIdentities | None = None  # or, spilled, in sorted runs

    def add(self, paths: Sequence[str]) -> None:
        if paths:
            self.add_hashes(self.hasher.batch(paths))

    def add_hashes(self, batch: pa.RecordBatch, reread: Reread | None = None) -> None:
        """Add hashed paths; a batch with DEFERRED identities needs ``reread`` and a ``resolve`` before use."""
        if batch.num_rows:
            if reread is not None:
                # Only the two hash halves and the row's number: ``resolve`` needs no more, and on
                # local storage every row is deferred.
                deferred = batch.select(["exact", "check"]).filter(pc.equal(batch["identity"], DEFERRED))
                if deferred.num_rows:
                    self._defer(deferred, reread)
            self._batches.append(batch)  # merged with what is frozen already at the next freeze
            self._batched_bytes += batch.nbytes
            if self.spilled is not None or (self.budget_bytes is not None and self._batched_bytes > self.budget_bytes):
                self._spill()

    def _defer(self, deferred: pa.RecordBatch, reread: Reread) -> None:
        if self._deferred is None:
            budget = self.budget_bytes // 4 if self.budget_bytes is not None else sys.maxsize
            self._deferred = hash_runs(budget, self.spill_dir, _DEFERRED_PREFIX)
        first = self._deferred_rows
        self._deferred_rows += deferred.num_rows
        rows = pa.array(np.arange(first, self._deferred_rows, dtype=np.int64))
        self._deferred.add(pa.Table.from_batches([deferred.append_column("row", rows)], schema=DEFERRED_SCHEMA))
        self._rereads.append((self._deferred_rows, reread))

    def _spill(self) -> None:
        """Move the batches held to sorted runs on disk; everything added later goes there too."""
        if self._frozen is not None:  # only a set never queried spills: a frozen one stays whole in memory
            return
        if self.spilled is None:
            assert self.budget_bytes is not None
            self.spilled = SpilledReferences(self.budget_bytes, self.spill_dir)
        self.spilled.add(self._batches)
        self._batches, self._batched_bytes = [], 0
        resolved, self._resolved = self._resolved, []
        for identities in resolved:
            self._keep_resolved(np.asarray(identities))

    def _keep_resolved(self, identities: np.ndarray) -> None:
        """Identities of resolved deferred paths: in memory while the set is, else in sorted runs."""
        if self.spilled is None:
            if len(identities):
                self._resolved.append(pa.array(identities, pa.int64()))
            return
        if self._resolved_runs is None:
            assert self.budget_bytes is not None
            self._resolved_runs = ResolvedIdentities(self.budget_bytes // 4, self.spill_dir)
        self._resolved_runs.add(identities)

    def close(self) -> None:
        """Remove the sorted runs, if any."""
        if self._deferred is not None:
            self._deferred.close()
            self._deferred = None
        if self._resolved_runs is not None:
            self._resolved_runs.close()
            self._resolved_runs = None
        if self.spilled is not None:
            log.info("referenced paths: spilled %d bytes to local disk as sorted runs", self.spilled.spilled_bytes)
            self.spilled.close()
            self.spilled = None

    def __enter__(self) -> ReferencedSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def narrowed_for(
        self, paths: Sequence[str], inodes: Sequence[tuple[int, int] | None] | None = None
    ) -> ReferencedSet:
        """A set that answers ``contains_exact`` and ``classify_unmatched`` for ``paths`` exactly as this one.

        In memory, this set itself. Spilled: an in-memory set of the rows that share an exact
        hash, a path key or (on local storage) a file identity with one of the paths; no other
        row can change an answer about them.
        """
        # Hashed a step at a time: the path keys as strings are as large as the paths, for a moment.
        steps = range(0, len(paths), _NARROW_STEP)
        return self.narrowed_for_parts(
            (paths[s : s + _NARROW_STEP], inodes[s : s + _NARROW_STEP] if inodes is not None else None) for s in steps
        )

    def narrowed_for_parts(
        self, parts: Iterable[tuple[Sequence[str], Sequence[tuple[int, int] | None] | None]]
    ) -> ReferencedSet:
        """``narrowed_for`` the paths of every part, given with their inodes (or None) a part at a time."""
        if self.spilled is None:
            return self
        if self._deferred is not None:
            raise RuntimeError("referenced paths with deferred identities were not resolved")
        exact: list[pa.Array] = []
        keys: list[pa.Array] = []
        found: list[pa.Array] = []
        for part, inodes in parts:
            part_keys, on_local = self.hasher.key_hashes(part)
            local = [i for i, is_local in enumerate(on_local) if is_local]
            given = [inodes[i] for i in local] if inodes is not None else None
            found.append(self._listed_identities([part[i] for i in local], given))
            exact.append(int64_array(path_hashes128(part)[0]))
            keys.append(int64_array(part_keys))
        identities = _joined(found)
        narrowed = ReferencedSet(self.hasher.equivalence)
        for batch in self.spilled.rows_for(_joined(exact), _joined(keys), identities):
            narrowed.add_hashes(batch)
        if self._resolved_runs is not None:
            narrowed._keep_resolved(np.asarray(self._resolved_runs.matching(identities)))
        return narrowed

    def resolve(self, listed: SortedRuns) -> int:
        """Find the identities of deferred paths; returns how many had to be ``stat``-ed here.

        ``listed`` holds the 128-bit hash and the identity of every file the listing found on
        local storage (LISTED_SCHEMA, in sorted runs by exact hash: ``hash_runs``). A deferred
        path with the hash of a listed file is that listed string, and the listing's ``lstat`` of
        a file that is not a symlink is the ``stat`` of its path. Any other deferred path
        (missing, hidden, behind a symlink) is read again from its batch's source and
        ``stat``-ed, exactly as an eager hash would. Both are read in hash order, once.
        """
        deferred, self._deferred = self._deferred, None
        if deferred is None:
            return 0
        rereads, self._rereads = self._rereads, []
        missing: list[pa.Table] = []
        try:
            # The first listed file with the same first half; a second listed file sharing it (a
            # 64-bit collision) only sends the path to the ``stat`` below.
            for identities, others in first_listed(deferred, listed):
                self._keep_resolved(identities)
                if others.num_rows:
                    missing.append(others)
            spilled = sum(run.stat().st_size for run in [*deferred.runs, *listed.runs])
            spilled += self._resolved_runs.spilled_bytes if self._resolved_runs is not None else 0
            if spilled:
                log.info("file identities: spilled %d bytes to local disk as sorted runs", spilled)
        finally:
            deferred.close()
        unresolved = pa.concat_tables(missing) if missing else DEFERRED_SCHEMA.empty_table()
        ends = [end for end, _ in rereads]
        rows: dict[int, set[tuple[int, int]]] = {}
        for exact, check, row in zip(*(unresolved[c].to_pylist() for c in DEFERRED_SCHEMA.names), strict=True):
            rows.setdefault(bisect_right(ends, row), set()).add((exact, check))
        stated: list[int] = []
        for source, wanted in rows.items():
            stated.extend(self.hasher.identity(p) for p in rereads[source][1]() if path_hash128(p) in wanted)
        self._keep_resolved(np.array(stated, np.int64))
        return int(unresolved.num_rows)

    def _freeze(self) -> tuple[pa.Array, pa.Table, pa.Array]:
        """De-duplicate what was added; only the de-duplicated arrays are kept afterwards."""
        if self.spilled is not None:  # fail closed (S2): a question only the whole set can answer
            raise RuntimeError("the referenced set is spilled to disk: query it through narrowed_for")
        if self._frozen is None or self._batches or self._resolved:
            added = pa.Table.from_batches(self._batches, schema=HASH_SCHEMA)
            if self._deferred is not None:
                raise RuntimeError("referenced paths with deferred identities were not resolved")
            exact_parts = [added["exact"]]
            key_parts = [added.select(["key", "scheme", "authority"])]
            identity_parts = [added["identity"], *(pa.chunked_array([r]) for r in self._resolved)]
            self._resolved = []
            if self._frozen is not None:
                exact_parts.insert(0, pa.chunked_array([self._frozen[0]]))
                key_parts.insert(0, self._frozen[1])
                identity_parts.insert(0, pa.chunked_array([self._frozen[2]]))
            exact = pc.unique(pa.chunked_array([c for p in exact_parts for c in p.chunks], pa.int64()))
            keys = pa.concat_tables(key_parts).group_by(["key", "scheme", "authority"]).aggregate([])
            identities = pc.unique(pa.chunked_array([c for p in identity_parts for c in p.chunks], pa.int64()))
            identities = identities.filter(pc.and_(pc.not_equal(identities, EMPTY), pc.not_equal(identities, DEFERRED)))
            self._batches = []
            self._frozen = (exact, keys.combine_chunks(), identities)
        return self._frozen

    def __len__(self) -> int:
        return self.spilled.count() if self.spilled is not None else len(self._freeze()[0])

    @property
    def nbytes(self) -> int:
        exact, keys, identities = self._freeze()
        return int(exact.nbytes + keys.nbytes + identities.nbytes)

    def contains_exact(self, paths: Sequence[str]) -> list[bool]:
        return self.contains_hashes(path_hashes128(paths)[0])

    def contains_hashes(self, hashes: Sequence[int]) -> list[bool]:
        """``contains_exact`` of paths already hashed with ``path_hash``."""
        return cast("list[bool]", pc.is_in(int64_array(hashes), value_set=self._freeze()[0]).to_pylist())

    def sorted_exact(self) -> Iterator[np.ndarray]:
        """Every exact hash held, in ascending order, as pieces (``exact_match.referenced_bits`` reads them)."""
        if self.spilled is not None:
            return self.spilled.sorted_exact()
        return iter([np.sort(np.asarray(self._freeze()[0]))])

    def classify_unmatched(
        self, paths: Sequence[str], inodes: Sequence[tuple[int, int] | None] | None = None
    ) -> dict[str, str]:
        """For paths not referenced exactly: ``equivalent`` (same file, other spelling) or ``conflict``.

        A local path whose file is one a referenced path names (same device and inode) is
        ``equivalent`` too. ``inodes`` are the listing's (device, inode) of each path, when it
        gave them (else the path is ``lstat``-ed here). Paths absent from the result share no
        path key and no file with any referenced path.
        """
        if not paths:
            return {}
        _, keys, identities = self._freeze()
        eq = self.hasher.equivalence
        path_keys, on_local = self.hasher.key_hashes(paths)
        hits = keys.filter(pc.is_in(keys["key"], value_set=int64_array(path_keys)))
        scopes: dict[int, list[tuple[int, int]]] = {}
        for key, scheme, authority in zip(*(hits[c].to_pylist() for c in ("key", "scheme", "authority")), strict=True):
            scopes.setdefault(key, []).append((scheme, authority))
        result: dict[str, str] = {}
        local: list[int] = []
        for i, (path, key, is_local) in enumerate(zip(paths, path_keys, on_local, strict=True)):
            if key not in scopes:
                if is_local and len(identities):
                    local.append(i)
                continue
            uri = Uri.parse(path)
            mine = (component_hash(eq.scheme(uri.scheme)), component_hash(eq.authority(uri.authority)))
            same = any(s in (EMPTY, mine[0]) and a in (EMPTY, mine[1]) for s, a in scopes[key])
            result[path] = "equivalent" if same else "conflict"
        if local:
            listed = self._listed_identities([paths[i] for i in local], [inodes[i] for i in local] if inodes else None)
            for i, hit in zip(local, pc.is_in(listed, value_set=identities).to_pylist(), strict=True):
                if hit:
                    result[paths[i]] = "equivalent"
        return result

    @staticmethod
    def _listed_identities(paths: Sequence[str], inodes: Sequence[tuple[int, int] | None] | None) -> pa.Array:
        """Identity of each listed local file: from the listing's (device, inode), else ``lstat``-ed here."""
        given = inodes if inodes is not None else [None] * len(paths)
        known = [i for i in given if i is not None]
        if len(known) == len(paths):
            return inode_identities(known)
        pairs = zip(paths, given, strict=True)
        identities = [listed_identity(local_path(p)) if i is None else inode_identity(*i) for p, i in pairs]
        return pa.array(identities, pa.int64())


def _joined(parts: list[pa.Array]) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], pa.int64())
