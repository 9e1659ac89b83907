"""The digest cache of manifest lists and manifests (S22): it saves reads and never changes a result.

- Over random histories (appends, overwrites, deletes, real expiries run with the cache, planted
  orphans), the orphan dry run and the expiry dry run give the same result with no cache, a cold
  cache, a cache warmed by the history's own runs, and the same cache warm again.
- Planted corrupt, truncated and stale digests (a manifest list replaced by another file, a file
  rewritten with another sync marker) are ignored: the file is decoded and the result is the same.
- Digests no run used for ``MAX_AGE_DAYS`` are pruned, and nothing else.
- A warm run decodes only the files committed since the last run; worker processes use the cache.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io import FileIO
from pyiceberg.table import Table

from airflow_iceberg_maint.expiry.run import expire_snapshots
from airflow_iceberg_maint.expiry.settings import ExpireOptions
from airflow_iceberg_maint.fs.locations import local_path
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES, INDEX_SNAPSHOTS
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.reachability import digests, manifests
from airflow_iceberg_maint.reachability.digests import DigestStore
from tests.expiry.history import after_clock_passes
from tests.orphans.inventories import bucket_objects, inventory_time, s3_client_of, write_s3_inventory
from tests.orphans.scenario import SCHEMA, Files, rows

OLD = datetime.now(UTC).timestamp() - 10 * 86400
OPS = ("append", "append", "overwrite", "delete", "expire", "orphan")
Result = tuple[Any, ...]


def _age(table: Table) -> None:
    """Every file of the table older than the orphan run's default cutoff (3 days)."""
    for dirpath, _, names in os.walk(local_path(table.location())):
        for name in names:
            os.utime(os.path.join(dirpath, name), (OLD, OLD))


def orphans(table: Table, cache: str | None, processes: int | None = None) -> Result:
    _age(table)
    options = OrphanOptions(dry_run=True, only_this_table=True, cache=cache, reader_processes=processes)
    report = remove_orphan_files(table, options, sources=[INDEX_FILES])
    return sorted(report.orphan_files), report.orphan_bytes, report.manifests_read


def expiry(table: Table, cache: str | None, older_than: datetime, dry_run: bool = True) -> Result:
    options = ExpireOptions(older_than=older_than, retain_last=1, dry_run=dry_run, cache=cache)
    report = expire_snapshots(table, options, sources=[INDEX_FILES], pins=[INDEX_SNAPSHOTS], now=datetime.now(UTC))
    return report.expired_snapshot_ids, report.deleted_files, report.deleted_bytes


def _middle(table: Table) -> datetime:
    times = sorted(s.timestamp_ms for s in table.metadata.snapshots)
    return datetime.fromtimestamp((times[len(times) // 2] + 1) / 1000, UTC)


def _step(catalog: Catalog, table: Table, op: str, n: int, cache: str) -> Table:
    start = 1000 * n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a delete or overwrite that matched no row commits nothing: fine
        if op == "append":
            table.append(rows(start, 3))
        elif op == "overwrite":
            table.overwrite(rows(start, 2), overwrite_filter=f"id < {start - 998}")
        elif op == "delete":
            table.delete(f"id = {start - 1000}")
        elif op == "expire":  # a real expiry with the cache: it stores digests of files it then deletes
            expiry(table, cache, _middle(table), dry_run=False)
        elif op == "orphan":
            Files(table).put(f"{table.location()}/data/orphan-{n}.parquet", b"x" * n)
    table = catalog.load_table("db.h")
    if table.current_snapshot() is not None:
        after_clock_passes(max(s.timestamp_ms for s in table.metadata.snapshots))
    return table


_SLOW = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=8, deadline=None, suppress_health_check=_SLOW)
@given(
    history=st.lists(st.sampled_from(OPS), min_size=2, max_size=6),
    later=st.lists(st.sampled_from(OPS), min_size=0, max_size=3),
)
def test_no_cold_and_warm_cache_give_the_same_dry_runs(history: list[str], later: list[str]) -> None:
    with TemporaryDirectory() as folder:
        warehouse = Path(folder) / "warehouse"
        warehouse.mkdir()
        catalog = SqlCatalog("h", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{warehouse}")
        catalog.create_namespace("db")
        warm, cold = f"{folder}/warm", f"{folder}/cold"
        table = catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
        table.append(rows(0, 3))
        for n, op in enumerate(history, start=1):
            table = _step(catalog, table, op, n, warm)
        orphans(table, warm)  # yesterday's runs: the cache holds what they read
        expiry(table, warm, _middle(table))
        for n, op in enumerate(later, start=len(history) + 1):
            table = _step(catalog, table, op, n, warm)
        cutoff = _middle(table)

        plain = orphans(table, None), expiry(table, None, cutoff)
        for cache in (cold, warm, cold, warm):  # cold, warmed by the history, then both warm
            assert (orphans(table, cache), expiry(table, cache, cutoff)) == plain


class Decodes:
    """Whole-file reads of manifest lists and manifests (``manifests._bytes``), by path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: Counter[str] = Counter()
        read = manifests._bytes

        def counted(io: FileIO, path: str) -> bytes:
            self.paths[path] += 1
            return read(io, path)

        monkeypatch.setattr(manifests, "_bytes", counted)

    def take(self) -> set[str]:
        paths = set(self.paths)
        self.paths.clear()
        return paths


def _metadata_files(table: Table) -> set[str]:
    """Every manifest list and manifest the table's snapshots reach."""
    lists = {s.manifest_list for s in table.metadata.snapshots}
    return lists | set(table.inspect.all_manifests()["path"].to_pylist())


def _table(catalog: Catalog, appends: int) -> Table:
    table = catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
    for n in range(appends):
        table.append(rows(10 * n, 2))
        after_clock_passes(table.current_snapshot().timestamp_ms)
    table.overwrite(rows(500, 2), overwrite_filter="id < 1")  # a manifest with a DELETED entry
    after_clock_passes(table.current_snapshot().timestamp_ms)
    return catalog.load_table("db.h")


def test_a_warm_run_decodes_only_the_new_files(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "digests")
    table = _table(sqlite_catalog, 4)
    decodes = Decodes(monkeypatch)
    first = orphans(table, cache)
    assert decodes.take() == _metadata_files(table)  # cold: every list and manifest

    assert orphans(table, cache) == first
    assert decodes.take() == set()  # warm: none
    before = _metadata_files(table)
    table.append(rows(900, 2))
    table = sqlite_catalog.load_table("db.h")
    new = _metadata_files(table) - before
    assert len(new) == 2  # the new snapshot's manifest list and its manifest

    orphans(table, cache)
    assert decodes.take() == new
    cutoff = _middle(table)
    warm = expiry(table, cache, cutoff)
    lists = {s.manifest_list for s in table.metadata.snapshots}
    deleted_manifests = set(warm[1]) & (_metadata_files(table) - lists)
    assert deleted_manifests
    # The orphan runs read every file the expiry's plan needs; its report reads the manifests it
    # deletes, for the kinds of their entries (data or delete files), and nothing else.
    assert decodes.take() == deleted_manifests
    assert warm == expiry(table, None, cutoff)
    assert decodes.take()  # without the cache, it decodes


def test_worker_processes_read_and_write_the_cache(sqlite_catalog: Catalog, tmp_path: Path) -> None:
    cache = tmp_path / "digests"
    table = _table(sqlite_catalog, 3)
    plain = orphans(table, None, processes=2)
    assert orphans(table, str(cache), processes=2) == plain
    stored = {p.name.rpartition(".")[2] for p in cache.rglob("*.*") if not p.name.startswith(".tmp")}
    assert stored == {"list", "manifest"}
    assert len(list(cache.rglob("*.list"))) == len(table.metadata.snapshots)
    assert orphans(table, str(cache), processes=2) == plain


def _digest(cache: Path, kind: str, path: str) -> Path:
    return Path(DigestStore(str(cache)).file(kind, path))


def _corrupt(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 3] ^= 0x01
    file.write_bytes(bytes(data))


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _unreadable(file: Path) -> None:
    file.unlink()
    file.mkdir()  # reading it fails with an OSError: the cache's read error, never the run's


@pytest.mark.parametrize("damage", [_corrupt, _truncate, _unreadable])
def test_a_damaged_digest_is_ignored_and_the_file_read(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    cache = tmp_path / "digests"
    table = _table(sqlite_catalog, 3)
    cutoff = _middle(table)
    plain = orphans(table, None), expiry(table, None, cutoff)
    assert (orphans(table, str(cache)), expiry(table, str(cache), cutoff)) == plain
    manifest_list = table.metadata.snapshots[-1].manifest_list
    manifest = table.inspect.all_manifests()["path"].to_pylist()[0]
    damage(_digest(cache, "list", manifest_list))
    damage(_digest(cache, "manifest", manifest))
    decodes = Decodes(monkeypatch)

    assert (orphans(table, str(cache)), expiry(table, str(cache), cutoff)) == plain
    assert set(decodes.paths) == {manifest_list, manifest}


def _replace_sync_marker(path: str) -> None:
    """The same records under another sync marker: another file of the same path and length."""
    data = Path(local_path(path)).read_bytes()
    sync = manifests._header(data)[1]
    Path(local_path(path)).write_bytes(data.replace(sync, bytes(reversed(sync))))


def test_a_file_replaced_under_its_path_is_read_again(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = str(tmp_path / "digests")
    table = _table(sqlite_catalog, 3)
    orphans(table, cache)
    cutoff = _middle(table)
    expiry(table, cache, cutoff)
    snapshots = table.metadata.snapshots
    manifest = table.inspect.all_manifests()["path"].to_pylist()[0]
    _replace_sync_marker(snapshots[-1].manifest_list)  # same length, another identity
    _replace_sync_marker(manifest)
    # The newest manifest list replaced by the oldest (another length and marker): what only the
    # newer snapshots reach is no longer referenced, so a stale digest would change the result.
    shutil.copyfile(local_path(snapshots[0].manifest_list), local_path(snapshots[-2].manifest_list))
    decodes = Decodes(monkeypatch)

    plain = orphans(table, None), expiry(table, None, cutoff)
    decodes.take()
    assert (orphans(table, cache), expiry(table, cache, cutoff)) == plain
    assert decodes.take() == {snapshots[-1].manifest_list, snapshots[-2].manifest_list, manifest}
    assert (orphans(table, cache), expiry(table, cache, cutoff)) == plain  # the new digests are right too
    assert decodes.take() == set()


def test_a_cache_that_cannot_be_written_never_fails_the_run(sqlite_catalog: Catalog, tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"not a folder")
    table = _table(sqlite_catalog, 2)
    cutoff = _middle(table)
    assert (orphans(table, str(blocked)), expiry(table, str(blocked), cutoff)) == (
        orphans(table, None),
        expiry(table, None, cutoff),
    )


def test_the_cache_never_holds_table_metadata(sqlite_catalog: Catalog, tmp_path: Path) -> None:
    cache = tmp_path / "digests"
    table = _table(sqlite_catalog, 2)
    orphans(table, str(cache))
    held = [p.read_text().partition("\n")[0] for p in cache.rglob("*.*")]
    assert held and not [h for h in held if ".metadata.json" in h]
    assert {h.split(",")[1].strip(' "') for h in held} == {"list", "manifest"}


@pytest.mark.s3
def test_on_s3_a_warm_expiry_decodes_no_file_and_finds_the_same(
    s3_catalog: Catalog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = str(tmp_path / "digests")
    table = s3_catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
    for n in range(3):
        table.append(rows(10 * n, 2))
        after_clock_passes(table.current_snapshot().timestamp_ms)
    table.overwrite(rows(500, 2), overwrite_filter="id < 1")  # drops a manifest: the kept ones are read
    table = s3_catalog.load_table("db.h")
    cutoff = _middle(table)
    decodes = Decodes(monkeypatch)
    cold = expiry(table, cache, cutoff)
    assert decodes.take()
    assert expiry(table, cache, cutoff) == cold
    lists = {s.manifest_list for s in table.metadata.snapshots}
    deleted_manifests = set(cold[1]) & (_metadata_files(table) - lists)
    assert deleted_manifests  # it does delete something: manifests were dropped
    # The plan's lists and kept manifests come from the cache (identities checked with a stat and a
    # ranged read on S3); the report reads the manifests it deletes, for their entries' kinds.
    assert decodes.take() == deleted_manifests
    assert expiry(table, None, cutoff) == cold


@pytest.mark.s3
def test_on_s3_an_orphan_run_from_an_inventory_reads_only_the_new_lists_and_manifests(
    s3_catalog: Catalog, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A daily orphan run listing from an S3 Inventory: after one new commit, the warm run GETs the new
    manifest list and manifest whole and no other (the others' identities are a HEAD and a ranged GET
    of the header each), and finds the same orphans."""
    cache = str(tmp_path / "digests")
    table = s3_catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
    for n in range(4):
        table.append(rows(10 * n, 2))
    table = s3_catalog.load_table("db.h")
    orphan = Files(table).put(f"{table.location()}/data/orphan-1.parquet", b"x")
    s3 = s3_client_of(table)

    def run(table: Table) -> list[str]:
        created = inventory_time()
        listing = write_s3_inventory(s3, s3_bucket, s3_bucket, bucket_objects(s3, s3_bucket), "CSV", created)
        options = OrphanOptions(older_than=created, dry_run=True, listing=listing, only_this_table=True, cache=cache)
        return sorted(remove_orphan_files(table, options, sources=[INDEX_FILES]).orphan_files)

    decodes = Decodes(monkeypatch)
    assert run(table) == [orphan]
    assert decodes.take() == _metadata_files(table)  # cold: every list and manifest
    before = _metadata_files(table)
    table.append(rows(900, 2))
    table = s3_catalog.load_table("db.h")
    new = _metadata_files(table) - before
    assert len(new) == 2
    assert run(table) == [orphan]
    assert decodes.take() == new


def test_digests_unused_for_the_maximum_age_are_pruned_and_nothing_else(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run touches the digests it uses; pruning (once a day, when a run opens the store) removes the
    store's files unused for ``MAX_AGE_DAYS`` (a killed writer's temporary file too) and never a file
    the store did not name; the next run reads what was pruned and finds the same."""
    cache = tmp_path / "digests"
    table = _table(sqlite_catalog, 3)
    first = orphans(table, str(cache))
    stored = sorted(cache.rglob("*.list")) + sorted(cache.rglob("*.manifest"))
    stale = datetime.now(UTC).timestamp() - (digests.MAX_AGE_DAYS + 1) * 86400
    for path in stored:
        os.utime(path, (stale, stale))
    sub = stored[0].parent
    leftover, foreign = sub / ".tmp-k1ll3d", sub / "notes.txt"
    outside = cache / ("f" * 64 + ".list")  # the store's kind of name, not in its subfolder
    for path in (leftover, foreign, outside):
        path.write_bytes(b"x")
        os.utime(path, (stale, stale))

    assert orphans(table, str(cache)) == first  # pruned at its first use today: not again
    assert all(p.stat().st_mtime > stale + 86400 for p in stored)  # each used, so touched
    unused = stored[::2]
    for path in unused:
        os.utime(path, (stale, stale))
    yesterday = datetime.now(UTC).timestamp() - 86400 - 60
    os.utime(cache / "last-pruned", (yesterday, yesterday))

    DigestStore(str(cache)).prune_if_due()
    assert {p for p in stored if not p.exists()} == set(unused)
    assert not leftover.exists() and foreign.exists() and outside.exists()
    kept = next(p for p in stored if p.exists())
    os.utime(kept, (stale, stale))
    DigestStore(str(cache)).prune_if_due()  # pruned a moment ago: not due
    assert kept.exists()

    decodes = Decodes(monkeypatch)
    assert orphans(table, str(cache)) == first
    read_again = {_digest(cache, kind, path) for path in decodes.paths for kind in ("list", "manifest")}
    assert set(unused) <= read_again and all(p.exists() for p in stored)


_NAMED = st.sampled_from(["digest", "tmp", "foreign", "other-folder", "upper-case", "symlink", "folder"])


@settings(max_examples=40, deadline=None, suppress_health_check=_SLOW)
@given(files=st.lists(st.tuples(_NAMED, st.booleans(), st.integers(0, 2**64)), min_size=1, max_size=12))
def test_pruning_removes_exactly_the_stores_own_unused_files(files: list[tuple[str, bool, int]]) -> None:
    """Over any mix of names, ages and kinds in the folder: pruning removes a regular file only when the
    store named it (a hash and a kind in the subfolder of its first two digits, or a writer's temporary
    file in such a subfolder) and it is unused for ``MAX_AGE_DAYS``; never a symlink, a folder, a name
    in another case, one in the wrong subfolder, or a file of anyone else."""
    stale = datetime.now(UTC).timestamp() - (digests.MAX_AGE_DAYS + 1) * 86400
    with TemporaryDirectory() as tmp:
        root = Path(tmp) / "digests"
        store = DigestStore(str(root))
        outside = Path(tmp) / "elsewhere.list"
        outside.write_bytes(b"x")
        expected: set[Path] = set()
        made: list[Path] = []
        for n, (kind, old, seed) in enumerate(files):
            digest = f"{seed:064x}"[-64:]
            sub = root / digest[:2]
            sub.mkdir(parents=True, exist_ok=True)
            path = {
                "digest": sub / f"{digest}.{'list' if n % 2 else 'manifest'}",
                "tmp": sub / f".tmp-{n}x{seed % 997}",
                "foreign": sub / f"notes-{n}.txt",
                "other-folder": root / f"{(int(digest[:2], 16) + 1) % 256:02x}" / f"{digest}.list",
                "upper-case": sub / f"{digest.upper()}.list",
                "symlink": sub / f"{digest}.manifest",
                "folder": sub / f"{digest}.list",
            }[kind]
            if path.exists() or path.is_symlink():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "symlink":
                path.symlink_to(outside)
            elif kind == "folder":
                path.mkdir()
            else:
                path.write_bytes(b"x")
            if old:
                os.utime(path, (stale, stale), follow_symlinks=False)
            made.append(path)
            upper = kind == "upper-case" and digest.upper() != digest
            if old and (kind in ("digest", "tmp") or (kind == "upper-case" and not upper)):
                expected.add(path)
        removed = store.prune()
        gone = {p for p in made if not (p.exists() or p.is_symlink())}
        assert gone == expected and removed == len(expected)
        assert outside.exists()
