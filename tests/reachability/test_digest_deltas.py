"""Manifest list digests stored as deltas over a base (S22): smaller, and never trusted past their base.

- A fast-append history stores most list digests as deltas over few full ones, and a warm run
  over them decodes nothing and finds what a run without the cache finds.
- A delta whose base digest is damaged, gone or replaced is ignored: exactly the lists whose
  digests lean on it are read again, and the result does not change.
- Over any sequence of writes, lists derived from one another or not, runs forgetting the bases
  they met, and damaged digests, the store returns a list's digest exactly as written, or nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from airflow_iceberg_maint.reachability import digest_deltas, digests
from airflow_iceberg_maint.reachability.digest_deltas import Bases, Entries
from airflow_iceberg_maint.reachability.digests import DigestStore
from tests.expiry.history import after_clock_passes
from tests.orphans.scenario import SCHEMA, rows
from tests.reachability.test_digests import Decodes, _corrupt, _digest, _truncate, orphans


def _appended(catalog: Catalog, appends: int) -> Table:
    table = catalog.create_table("db.h", schema=SCHEMA, properties={"format-version": "2"})
    for n in range(appends):
        table.append(rows(10 * n, 2))
        after_clock_passes(table.current_snapshot().timestamp_ms)
    return catalog.load_table("db.h")


def _heads(cache: Path) -> dict[str, list[Any]]:
    """Each stored list digest's head, by the manifest list's path."""
    heads = [json.loads(p.read_text().partition("\n")[0]) for p in cache.rglob("*.list")]
    return {head[2]: head for head in heads}


def _forget_bases(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts from: no base met yet."""
    monkeypatch.setattr(digests, "_BASES", Bases())


def test_a_fast_append_history_is_stored_as_deltas_over_few_bases(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "digests"
    table = _appended(sqlite_catalog, 24)
    _forget_bases(monkeypatch)
    plain = orphans(table, None)
    assert orphans(table, str(cache)) == plain
    heads = _heads(cache)
    assert set(heads) == {s.manifest_list for s in table.metadata.snapshots}
    bases = {path for path, head in heads.items() if head[0] == 1}
    deltas = {path: head[5][0] for path, head in heads.items() if head[0] == 2}
    assert len(bases) <= 10 and len(deltas) >= 14 and set(deltas.values()) <= bases
    # Lists name 1 + 2 + ... + 24 = 300 manifests; the digests store far fewer entries.
    stored = sum(len(json.loads(p.read_text().split("\n")[1])) for p in cache.rglob("*.list"))
    assert stored < 300 / 2

    _forget_bases(monkeypatch)
    decodes = Decodes(monkeypatch)
    assert orphans(table, str(cache)) == plain
    assert decodes.take() == set()


def _replace_with_another_full_digest(file: Path) -> None:
    """The same digest in other bytes, so under another checksum: as if another run stored it meanwhile."""
    lines = file.read_text().rstrip("\n").split("\n")[:-1]
    body = "\n".join(json.dumps(json.loads(line), separators=(",", ":")) for line in lines)
    file.write_text(f"{body}\n{hashlib.sha256(body.encode()).hexdigest()}\n")


@pytest.mark.parametrize("damage", [_corrupt, _truncate, Path.unlink, _replace_with_another_full_digest])
def test_a_delta_over_a_damaged_or_replaced_base_is_ignored_and_the_list_read(
    sqlite_catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Any
) -> None:
    cache = tmp_path / "digests"
    table = _appended(sqlite_catalog, 16)
    _forget_bases(monkeypatch)
    plain = orphans(table, None)
    orphans(table, str(cache))
    deltas = {path: head[5][0] for path, head in _heads(cache).items() if head[0] == 2}
    base = max(set(deltas.values()), key=list(deltas.values()).count)
    leaning = {path for path, on in deltas.items() if on == base}
    assert leaning
    damage(_digest(cache, "list", base))

    _forget_bases(monkeypatch)
    decodes = Decodes(monkeypatch)
    assert orphans(table, str(cache)) == plain
    if damage is _replace_with_another_full_digest:  # valid for its own list, not the base of the deltas
        assert decodes.take() == leaning
    else:  # the base read again; once its digest is stored again, byte for byte, the deltas over it hold
        read = decodes.take()
        assert base in read and read <= leaning | {base}
    _forget_bases(monkeypatch)
    assert orphans(table, str(cache)) == plain  # the digests stored again are right
    assert decodes.take() == set()


# The store alone, over any sequence of writes, forgotten bases and damage.

_PATHS = [f"s3://b/t/metadata/snap-{n}.avro" for n in range(5)]
_NAMES = [f"s3://b/t/metadata/m{n}.avro" for n in range(12)]
_ENTRY = st.tuples(st.sampled_from(_NAMES), st.integers(0, 3))
_OPS = st.one_of(
    st.tuples(st.just("derive"), st.sampled_from(_PATHS), st.integers(0, 40), st.none() | _ENTRY),
    st.tuples(st.just("fresh"), st.sampled_from(_PATHS), st.lists(_ENTRY, max_size=14)),
    st.tuples(st.just("forget")),
    st.tuples(st.just("damage"), st.sampled_from(_PATHS), st.sampled_from(["corrupt", "unlink", "swap"])),
)


def _entries(pairs: list[tuple[str, int]]) -> Entries:
    return [p for p, _ in pairs], [s for _, s in pairs]


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(_OPS, min_size=1, max_size=30))
def test_the_store_returns_a_lists_digest_as_written_or_nothing(ops: list[tuple[Any, ...]]) -> None:
    """``read`` after any sequence: the entries and identity last written for the path, or None; never
    another list's, an older one's, or a delta applied over a base it was not made on."""
    saved = digests._BASES
    try:
        with TemporaryDirectory() as folder:
            store = DigestStore(folder)
            written: dict[str, tuple[digests.Identity, Entries]] = {}
            last: list[tuple[str, int]] = []
            for n, op in enumerate(ops):
                if op[0] in ("derive", "fresh"):
                    if op[0] == "derive":
                        at = op[2] % (len(last) + 1)
                        last = [*last[:at], op[3], *last[at:]] if op[3] else last[:at] + last[at + 1 :]
                    else:
                        last = op[2]
                    identity = (n, n.to_bytes(16, "big"))
                    store.write("list", op[1], identity, _entries(last))
                    written[op[1]] = (identity, _entries(last))
                elif op[0] == "forget":
                    digests._BASES = Bases()
                elif (file := Path(store.file("list", op[1]))).exists():
                    if op[2] == "corrupt":  # not undone by a second corruption, unlike a flipped bit
                        data = bytearray(file.read_bytes())
                        data[len(data) // 2] = (data[len(data) // 2] + 1) % 256
                        file.write_bytes(bytes(data))
                    elif op[2] == "unlink":
                        file.unlink()
                    elif (other := Path(store.file("list", _PATHS[(_PATHS.index(op[1]) + 1) % 5]))).exists():
                        file.write_bytes(other.read_bytes())  # another list's digest under this one's name
                    else:
                        continue
                    written.pop(op[1], None)
                for path in _PATHS:
                    assert store.read("list", path) in (None, written.get(path))
            digests._BASES = Bases()
            for path in _PATHS:
                assert store.read("list", path) in (None, written.get(path))
    finally:
        digests._BASES = saved


def test_a_layout_outside_its_base_or_own_entries_is_refused() -> None:
    base: Entries = (["a", "b", "c"], [1, 2, 3])
    own: Entries = (["x"], [9])
    assert digest_deltas.apply(base, [[0, 2], [-1, 1], [2, 3]], own) == (["a", "b", "x", "c"], [1, 2, 9, 3])
    for runs in ([[0, 4]], [[-1, 2]], [[0, 1]], [[2, 1], [-1, 1]], [[-1, 1], ["0", 1]], [[-1, 1], [0]]):
        with pytest.raises(ValueError):
            digest_deltas.apply(base, runs, own)


_BODIES = [
    b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser's recursion
    b'{"a": 1}\n[]\n[]',  # a head that is no list
    b'[1, "list", "p", "12", "00"]\n[]\n[]',  # a length that is no number
    b'[1, "list", "p", 12, "zz"]\n[]\n[]',  # a sync marker that is no hex
    b'[1, "list", "p", 12, "00"]\n["a"]\n[]',  # paths and sizes that do not pair
    b'[1, "list", "p", 12, "00"]\n[1]\n[1]',  # a path that is no string
    b'[2, "list", "p", 12, "00", ["q", "x"]]\n[]\n[]\n[[true, 1]]',  # a delta's layout of booleans
    b'[2, "list", "p", 12, "00", {"q": 1}]\n[]\n[]\n[]',  # a base that is not [path, checksum]
    b'[2, "manifest", "p", 12, "00", ["q", "x"]]\n[]\n[]\n[]',  # a manifest's digest as a delta
    b"\xff\xfe",  # no text
]


@pytest.mark.parametrize("body", _BODIES, ids=range(len(_BODIES)))
def test_a_digest_with_a_valid_checksum_and_odd_content_is_ignored(body: bytes, tmp_path: Path) -> None:
    """A checksum proves the digest is whole, not that its writer was sane: whatever it holds, a read
    gives nothing (the file is read) and raises nothing."""
    store = DigestStore(str(tmp_path))
    kind = "manifest" if b'"manifest"' in body else "list"
    file = Path(store.file(kind, "p"))
    file.parent.mkdir(parents=True)
    file.write_bytes(body + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n")
    assert store.read(kind, "p") is None


def test_the_bases_a_process_holds_are_bounded_by_their_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest_deltas, "MAX_HELD_BYTES", 10_000)
    bases = Bases()
    lists = {f"l{n}": ([f"m{n}-{i}" for i in range(20)], list(range(20))) for n in range(10)}
    for path, entries in lists.items():
        bases.put("f", path, "c", entries)
    held = [path for path in lists if bases.get("f", path, "c") is not None]
    assert held == ["l6", "l7", "l8", "l9"]  # 20 entries of 125 bytes or so each: 4 fit in 10,000
    bases.drop("f", "l9")
    assert bases.get("f", "l9", "c") is None and bases.latest("f") == ("l8", "c", lists["l8"])
    assert bases.get("f", "l8", "another checksum") is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)
_HEAD = st.tuples(st.sampled_from([1, 2, 3, "1", None]), st.sampled_from(["list", "manifest", 1]), st.just("p"))
_LINE = st.one_of(
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.tuples(_HEAD, st.lists(_JSON, max_size=4)).map(lambda h: json.dumps([*h[0], *h[1]]).encode()),
    st.binary(max_size=20),
    st.integers(1, 200_000).map(lambda depth: b"[" * depth + b"]" * depth),  # past the parser's recursion
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_LINE, min_size=1, max_size=5), kind=st.sampled_from(["list", "manifest"]))
def test_a_read_never_raises_whatever_a_checksummed_digest_holds(lines: list[bytes], kind: str) -> None:
    """The class of the odd contents above: any lines under a valid checksum. A read gives nothing or a
    well-formed digest (paths that are strings, sizes that are integers, paired), and never raises."""
    with TemporaryDirectory() as folder:
        store = DigestStore(folder)
        body = b"\n".join(lines)
        file = Path(store.file(kind, "p"))
        file.parent.mkdir(parents=True)
        file.write_bytes(body + b"\n" + hashlib.sha256(body).hexdigest().encode() + b"\n")
        found = store.read(kind, "p")
        if found is not None:
            (length, sync), (paths, sizes) = found
            assert type(length) is int and isinstance(sync, bytes) and len(paths) == len(sizes)
            assert all(type(p) is str for p in paths) and all(type(s) is int for s in sizes)
