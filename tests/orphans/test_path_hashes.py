"""Hashing many paths at once (in C) gives exactly what hashing them one at a time gives."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_iceberg_maint.fs.local import LocalStorage
from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.orphans.listing.candidates import keep_filter, list_candidates
from airflow_iceberg_maint.reachability.path_hashes import (
    DEFERRED,
    EMPTY,
    LISTED_SCHEMA,
    PathHasher,
    inode_identities,
    inode_identity,
    named_identity,
    path_hash,
    path_hash128,
    path_hashes128,
)
from airflow_iceberg_maint.reachability.referenced import ReferencedSet, given_paths
from airflow_iceberg_maint.reachability.referenced_runs import DEFERRED_SCHEMA, by_exact, first_listed, hash_runs

ROOT = "s3://bucket/wh/db/t"


def _one_at_a_time(hasher: PathHasher, paths: list[str]) -> pa.RecordBatch:
    return hasher._batch_each(paths)


def _uniform(hasher: PathHasher, paths: list[str]) -> bool:
    return hasher._uniform_batch(paths) is not None


def test_halves_are_the_hashes_of_each_path() -> None:
    paths = ["s3://b/a", "file:///tmp/x y/é.parquet", "/tmp/odd-\udcff-name", ""]
    first, second = path_hashes128(paths)
    assert list(zip(first, second, strict=True)) == [path_hash128(p) for p in paths]
    assert list(first) == [path_hash(p) for p in paths]


def test_identities_are_those_of_each_pair() -> None:
    devices, inodes = [0, 2049, 2**64 - 1, 66306], [0, 131, 2**64 - 1, 2**40 + 7]
    assert inode_identities(list(zip(devices, inodes, strict=True))).to_pylist() == [
        inode_identity(d, i) for d, i in zip(devices, inodes, strict=True)
    ]


@pytest.mark.parametrize(
    ("paths", "uniform"),
    [
        ([f"{ROOT}/data/{i:04d}.parquet" for i in range(50)], True),
        ([f"{ROOT}/data/a.parquet", "s3://other/wh/db/t/data/a.parquet"], False),  # two heads
        ([f"{ROOT}/data/a.parquet", f"{ROOT}/data//b.parquet"], False),  # a key to normalise
        ([f"{ROOT}/data/a.parquet", f"{ROOT}/data/dir/"], False),  # a trailing slash
        ([f"{ROOT}/data/a.parquet", "s3://bucket"], False),  # the head alone
        ([f"{ROOT}/data/a/\0b.parquet", f"{ROOT}/data/c.parquet"], False),  # a false alarm: still equal
        (["s3a://bucket/wh/x.parquet", "s3a://bucket/wh/_hidden/y.parquet"], True),  # hidden is local-only
    ],
)
def test_object_store_batches_equal_one_at_a_time(paths: list[str], uniform: bool) -> None:
    fast, slow = PathHasher(PathEquivalence()), PathHasher(PathEquivalence())
    assert _uniform(PathHasher(PathEquivalence()), paths) is uniform
    assert fast.batch(paths).equals(_one_at_a_time(slow, paths))


@pytest.mark.parametrize(
    ("names", "uniform"),
    [
        (["data/a.parquet", "data/p=1/b.parquet", "metadata/snap-1.avro"], True),
        (["data/a.parquet", "data/.hidden.parquet"], False),  # hidden: stat-ed one by one
        (["data/a.parquet", "_temporary/b.parquet"], False),
        (["data/a.parquet", "data/_p=1/b.parquet"], False),
        (["data/a.parquet", ".b.parquet"], False),
        (["data/a.parquet", "data/b\0.parquet"], False),  # a false alarm: still equal
    ],
)
def test_local_batches_equal_one_at_a_time(tmp_path: Path, names: list[str], uniform: bool) -> None:
    root = f"file://{tmp_path}/t"
    for name in names[:2]:  # some exist, some do not: identities are stat-ed or EMPTY alike
        if "\0" not in name:
            os.makedirs(os.path.dirname(f"{tmp_path}/t/{name}"), exist_ok=True)
            Path(f"{tmp_path}/t/{name}").write_bytes(b"x")
    paths = [f"{root}/{n}" for n in names] + [f"file://{tmp_path}/elsewhere/c.parquet"] * (not uniform)
    fast = PathHasher(PathEquivalence(), listed_under=root)
    slow = PathHasher(PathEquivalence(), listed_under=root)
    assert _uniform(PathHasher(PathEquivalence(), listed_under=root), paths) is uniform
    batch = fast.batch(paths)
    assert batch.equals(_one_at_a_time(slow, paths))
    if uniform:
        assert set(batch["identity"].to_pylist()) == {DEFERRED}
        assert batch["check"].to_pylist() == [path_hash128(p)[1] for p in paths]


@pytest.mark.parametrize(
    ("names", "uniform"),
    [
        (["data/a.parquet", "data/p=1/b.parquet", "metadata/snap-1.avro", "data/.hidden.parquet"], True),
        (["data/a.parquet", "_temporary/b.parquet", "data/link.parquet"], True),
        (["data/a.parquet", "data/./b.parquet"], False),  # a key to normalise
    ],
)
def test_local_batches_without_a_listing_stat_every_path_as_one_at_a_time(
    tmp_path: Path, names: list[str], uniform: bool
) -> None:
    """Snapshot expiry lists nothing: every local identity is ``stat``-ed, symlinks followed, in either route."""
    root = f"file://{tmp_path}/t"
    for name in names[:2]:
        os.makedirs(os.path.dirname(f"{tmp_path}/t/{name}"), exist_ok=True)
        Path(f"{tmp_path}/t/{name}").write_bytes(b"x")
    os.makedirs(f"{tmp_path}/t/data", exist_ok=True)
    os.symlink(f"{tmp_path}/t/{names[0]}", f"{tmp_path}/t/data/link.parquet")
    paths = [f"{root}/{n}" for n in names]
    fast, slow = PathHasher(PathEquivalence()), PathHasher(PathEquivalence())
    assert _uniform(PathHasher(PathEquivalence()), paths) is uniform
    batch = fast.batch(paths)
    assert batch.equals(_one_at_a_time(slow, paths))
    identities = batch["identity"].to_pylist()
    assert identities == [named_identity(f"{tmp_path}/t/{n}") for n in names]
    assert identities[0] != EMPTY
    if "data/link.parquet" in names:
        assert identities[names.index("data/link.parquet")] == identities[0]  # the file it points at


def test_plain_local_paths_without_a_scheme(tmp_path: Path) -> None:
    root = str(tmp_path / "t")
    paths = [f"{root}/data/{i}.parquet" for i in range(5)] + [f"{root}/metadata/v1.metadata.json"]
    fast, slow = PathHasher(PathEquivalence(), root), PathHasher(PathEquivalence(), root)
    assert _uniform(PathHasher(PathEquivalence(), root), paths)
    assert fast.batch(paths).equals(_one_at_a_time(slow, paths))
    double = [f"/{root}/data/a.parquet"]  # "//tmp/...": an authority to Uri.parse, not this head
    assert not _uniform(PathHasher(PathEquivalence(), root), [paths[0], *double])


def test_listing_hashes_equal_those_of_each_file(tmp_path: Path) -> None:
    """More files than a chunk: candidates, their hashes and every file's identity line up."""
    table = tmp_path / "t"
    (table / "data").mkdir(parents=True)
    old = (datetime.now(UTC) - timedelta(days=10)).timestamp()
    for i in range(2_500):
        path = table / "data" / f"{i:05d}.parquet"
        path.write_bytes(b"x")
        if i % 3:
            os.utime(path, (old, old))
    root = f"file://{table}"
    listing = list_candidates(LocalStorage(), root, keep_filter([]), datetime.now(UTC) - timedelta(days=5))
    every = list(LocalStorage().list_files(root, keep_filter([])))
    assert listing.listed == len(every) == 2_500
    old_paths = sorted(f"{root}/data/{i:05d}.parquet" for i in range(2_500) if i % 3)
    assert sorted(c.path for c in listing.candidates) == old_paths
    assert list(listing.candidate_hashes) == [path_hash(c.path) for c in listing.candidates]
    expected = {(*path_hash128(f.path), inode_identity(*f.inode)) for f in every if f.inode is not None}
    rows = pa.concat_tables([entries for entries, _ in by_exact(listing.on_disk)]).to_pydict()
    listing.close()
    assert set(zip(rows["exact"], rows["check"], rows["identity"], strict=True)) == expected
    assert EMPTY not in rows["identity"] and DEFERRED not in rows["identity"]


def test_resolve_takes_listed_identities_and_stats_the_rest(tmp_path: Path) -> None:
    """A deferred path takes the identity of the listed file with its 128-bit hash, across listing chunks;
    a path whose first half matches a listed file but not its second (a 64-bit collision), or that was
    not listed, is ``stat``-ed instead."""
    root = f"file://{tmp_path}/t"
    (tmp_path / "t" / "data").mkdir(parents=True)
    for name in ("a", "b"):
        (tmp_path / "t" / "data" / f"{name}.parquet").write_bytes(b"x")
    a, b, c = (f"{root}/data/{n}.parquet" for n in "abc")  # c does not exist
    refs = ReferencedSet(PathEquivalence())
    batch = PathHasher(PathEquivalence(), listed_under=root).batch([a, b, c])
    assert set(batch["identity"].to_pylist()) == {DEFERRED}
    refs.add_hashes(batch, lambda: [a, b, c])
    (a_first, a_second), (b_first, b_second) = path_hash128(a), path_hash128(b)
    listed = hash_runs(2**20, None, "iceberg-orphan-listed-")
    listed.add(pa.table({"exact": [a_first], "check": [a_second], "identity": [12345]}, schema=LISTED_SCHEMA))
    listed.add(pa.table({"exact": [b_first], "check": [b_second + 1], "identity": [777]}, schema=LISTED_SCHEMA))
    assert refs.resolve(listed) == 2  # b and c
    b_identity = named_identity(str(tmp_path / "t" / "data" / "b.parquet"))
    assert sorted(refs._freeze()[2].to_pylist()) == sorted([12345, b_identity])


def test_first_listed_is_the_first_listed_file_with_the_hash_whatever_the_runs() -> None:
    """The merged pass pairs each deferred path with the earliest listed file of its exact hash, as a lookup in
    one table would: many equal hashes (64-bit collisions) across runs and pieces, some with another check."""
    random = np.random.default_rng(7)
    listed_exact = random.integers(0, 300, 5_000)
    listed_check = random.integers(0, 3, 5_000)
    deferred_exact = random.integers(-10, 310, 4_000)
    deferred_check = random.integers(0, 3, 4_000)
    listed = hash_runs(20_000, None, "iceberg-orphan-listed-")  # a run of a few hundred rows
    deferred = hash_runs(20_000, None, "iceberg-orphan-deferred-")
    for start in range(0, 5_000, 700):
        part = slice(start, start + 700)
        listed_identities = np.arange(start, start + len(listed_exact[part]))
        columns = [pa.array(listed_exact[part]), pa.array(listed_check[part]), pa.array(listed_identities)]
        listed.add(pa.Table.from_arrays(columns, schema=LISTED_SCHEMA))
    for start in range(0, 4_000, 500):
        rows = np.arange(start, start + 500)
        columns = [pa.array(deferred_exact[rows]), pa.array(deferred_check[rows]), pa.array(rows)]
        deferred.add(pa.Table.from_arrays(columns, schema=DEFERRED_SCHEMA))
    assert len(listed.runs) > 5 and len(deferred.runs) > 5
    first: dict[int, tuple[int, int]] = {}
    for row, (exact, check) in enumerate(zip(listed_exact.tolist(), listed_check.tolist(), strict=True)):
        first.setdefault(exact, (check, row))
    expected_identities, expected_others = [], []
    for row, (exact, check) in enumerate(zip(deferred_exact.tolist(), deferred_check.tolist(), strict=True)):
        if exact in first and first[exact][0] == check:
            expected_identities.append(first[exact][1])
        else:
            expected_others.append(row)
    identities: list[int] = []
    others: list[int] = []
    for found, rest in first_listed(deferred, listed):
        identities.extend(found.tolist())
        others.extend(rest["row"].to_pylist())
    listed.close()
    deferred.close()
    assert sorted(identities) == sorted(expected_identities)
    assert sorted(others) == expected_others


@pytest.mark.parametrize("budget", [1, None])
def test_resolved_identities_of_a_spilled_set_go_to_sorted_runs_and_keep_other_spellings(
    tmp_path: Path, budget: int | None
) -> None:
    """A spilled set keeps the identities ``resolve`` finds in sorted runs on disk, not in memory, and its
    narrowed sets still find a hard link of a referenced file (identity from the listing) and the target of a
    referenced symlink (identity ``stat``-ed) equivalent, as the set in memory does; ``close`` removes them."""
    data = tmp_path / "t" / "data"
    data.mkdir(parents=True)
    spill = tmp_path / "spill"
    spill.mkdir()
    names = [f"{i:03d}.parquet" for i in range(40)]
    for name in [*names, "target.parquet", "orphan.parquet"]:
        (data / name).write_bytes(b"x")
    os.link(data / names[7], data / "other-name.parquet")
    os.symlink(data / "target.parquet", data / "link.parquet")  # not listed: the listing skips symlinks
    root = f"file://{tmp_path}/t"
    referenced = [f"{root}/data/{n}" for n in [*names, "link.parquet"]]
    listing = list_candidates(LocalStorage(), root, keep_filter([]), datetime.now(UTC) + timedelta(days=1))
    unmatched = sorted(c.path for c in listing.candidates if c.path not in referenced)
    assert unmatched == [f"{root}/data/{n}" for n in ("orphan.parquet", "other-name.parquet", "target.parquet")]
    with ReferencedSet(PathEquivalence(), budget, str(spill)) as refs:
        for start in range(0, len(referenced), 8):
            part = referenced[start : start + 8]
            refs.add_hashes(PathHasher(PathEquivalence(), listed_under=root).batch(part), given_paths(part))
        assert (refs.spilled is not None) == (budget == 1)
        assert refs.resolve(listing.on_disk) == 1  # the symlink
        listing.close()
        spilled = [p.name for p in spill.iterdir() if p.name.startswith("iceberg-orphan-resolved-")]
        assert len(spilled) == (budget == 1)
        if spilled:
            assert len(list((spill / spilled[0]).iterdir())) > 1  # a run a piece, in this budget
        for _ in range(2):  # each narrowed set is one more pass over the runs
            narrowed = refs.narrowed_for(unmatched)
            assert narrowed.contains_exact(unmatched) == [False] * 3
            assert narrowed.classify_unmatched(unmatched) == {unmatched[1]: "equivalent", unmatched[2]: "equivalent"}
    assert list(spill.iterdir()) == []
