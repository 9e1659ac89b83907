"""A current metadata file that cannot be parsed, or lacks what the spec requires, is one line and exit 2 (S2, S7).

The commands run as a user runs them (``iceberg-maint orphans`` / ``expire-snapshots``, dry and
real) on a real SQLite catalog whose current metadata file is damaged: truncated at any offset,
not JSON, not UTF-8, a field of the wrong type, a field the spec requires left out, a format-v1
snapshot listing its manifests inline. Every file of the warehouse is aged, so a run that read
the damaged file as a table without snapshots would delete the data files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.cli import main
from tests.orphans.scenario import SCHEMA, rows

COMMANDS = [
    ("orphans", "--dry-run"),
    ("orphans", "--older-than-days", "3"),
    ("expire-snapshots", "--dry-run", "--older-than-days", "0"),
    ("expire-snapshots", "--older-than-days", "0", "--retain-last", "1"),
]
# The fields the Iceberg spec requires of a table metadata file and of a snapshot, by format version.
REQUIRED = {
    1: ["format-version", "location", "last-updated-ms", "last-column-id"],
    2: [
        "format-version",
        "table-uuid",
        "location",
        "last-sequence-number",
        "last-updated-ms",
        "last-column-id",
        "schemas",
        "current-schema-id",
        "partition-specs",
        "default-spec-id",
        "last-partition-id",
        "sort-orders",
        "default-sort-order-id",
    ],
}
SNAPSHOT_REQUIRED = {
    1: ["snapshot-id", "timestamp-ms"],
    2: ["snapshot-id", "sequence-number", "timestamp-ms", "summary"],
}
# Values no lax reading can take for the field: (path, value).
WRONG_TYPES: list[tuple[tuple[Any, ...], Any]] = [
    (("location",), 17),
    (("table-uuid",), "not-a-uuid"),
    (("last-updated-ms",), "yesterday"),
    (("last-column-id",), [1]),
    (("schemas",), {"a": 1}),
    (("schemas", 0, "fields", 0, "type"), 12),
    (("partition-specs",), 3),
    (("format-version",), "two"),
    (("current-snapshot-id",), "latest"),
    (("snapshots",), "none"),
    (("snapshots", 0), [1, 2]),
    (("snapshots", 0, "snapshot-id"), "first"),
    (("snapshots", 0, "manifest-list"), ["a", "b"]),
    (("snapshots", 0, "timestamp-ms"), {"at": 1}),
    (("refs", "main", "snapshot-id"), [1]),
    (("refs", "main"), "main"),
    (("refs", "main", "type"), 5),
    (("properties",), [1]),
    (("schemas", 0, "fields"), "id"),
    (("partition-specs", 0, "fields"), "x"),
    (("sort-orders",), 3),
    (("snapshot-log",), {"a": 1}),
    (("metadata-log",), [{"metadata-file": 1}]),
]


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "PYICEBERG_CATALOG__DEFAULT__TYPE": "sql",
        "PYICEBERG_CATALOG__DEFAULT__URI": f"sqlite:///{tmp_path}/catalog.db",
        "PYICEBERG_CATALOG__DEFAULT__WAREHOUSE": f"file://{tmp_path}/wh",
    }


def _tables(tmp_path: Path) -> dict[str, Path]:
    """A format-v2 and a format-v1 table, each with two snapshots, a tag and a planted orphan; every file aged."""
    catalog = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("db")
    current = {}
    for name, version in (("db.t", "2"), ("db.v1", "1")):
        table = catalog.create_table(name, schema=SCHEMA, properties={"format-version": version})
        table.append(rows(0, 5))
        table.overwrite(rows(5, 5))
        table.manage_snapshots().create_tag(table.metadata.snapshots[0].snapshot_id, "audit").commit()
        table = catalog.load_table(name)
        (Path(table.location().removeprefix("file://")) / "data" / "orphan.parquet").write_bytes(b"PAR1")
        current[name] = Path(table.metadata_location.removeprefix("file://"))
    old = time.time() - 10 * 86_400
    for path in (tmp_path / "wh").rglob("*"):
        os.utime(path, (old, old))
    return current


def _files(tmp_path: Path) -> set[Path]:
    return {p for p in (tmp_path / "wh").rglob("*") if p.is_file()}


def _set(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    *parents, last = path
    for step in parents:
        body = body[step]
    body[last] = value
    return body


def _wrong_type(original: bytes, path: tuple[Any, ...], value: Any) -> bytes:
    body = json.loads(original)
    _set(body, path, value)
    return json.dumps(body).encode()


def _inline_manifests(original: bytes) -> bytes:
    """The v1 metadata with each snapshot's manifests listed inline instead of in a manifest list."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import read_manifest_list

    body = json.loads(original)
    io = PyArrowFileIO()
    for snapshot in body["snapshots"]:
        listed = read_manifest_list(io.new_input(snapshot.pop("manifest-list")))
        snapshot["manifests"] = [m.manifest_path for m in listed]
    return json.dumps(body).encode()


def corruptions(current: dict[str, Path], originals: dict[str, bytes]) -> st.SearchStrategy[tuple[str, bytes, str]]:
    """(table, damaged bytes of its current metadata file, what was done)."""

    def edit(name: str, change: Callable[[dict[str, Any]], object]) -> bytes:
        body = json.loads(originals[name])
        change(body)
        return json.dumps(body).encode()

    def of(name: str) -> st.SearchStrategy[tuple[str, bytes, str]]:
        data = originals[name]
        version = json.loads(data)["format-version"]
        spot = st.integers(0, len(data) - 1)
        return st.one_of(
            spot.map(lambda i: (name, data[:i], f"truncated at {i}")),
            spot.map(lambda i: (name, data[:i] + b"\x01" + data[i + 1 :], f"control byte at {i}")),
            spot.map(lambda i: (name, data[:i] + b"\xff" + data[i + 1 :], f"not UTF-8 at {i}")),
            st.sampled_from(WRONG_TYPES).map(lambda w: (name, _wrong_type(data, *w), f"{w[0]} = {w[1]!r}")),
            st.sampled_from([*REQUIRED[version], "snapshots"]).map(
                lambda f: (name, edit(name, lambda b: b.pop(f)), f"no {f}")
            ),
            st.sampled_from(SNAPSHOT_REQUIRED[version]).map(
                lambda f: (name, edit(name, lambda b: b["snapshots"][-1].pop(f)), f"no snapshot {f}")
            ),
            st.just((name, b"[]", "a JSON list")),
        )

    inline = st.just(("db.v1", _inline_manifests(originals["db.v1"]), "v1 inline manifests"))
    return st.one_of(of("db.t"), of("db.v1"), inline)


def test_damaged_metadata_is_one_line_exit_2_and_nothing_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    current = _tables(tmp_path)
    originals = {name: path.read_bytes() for name, path in current.items()}
    before = _files(tmp_path)

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(damage=corruptions(current, originals), command=st.sampled_from(COMMANDS))
    def check(damage: tuple[str, bytes, str], command: tuple[str, ...]) -> None:
        name, data, what = damage
        event(what if what[0] in "nv(" else what.split(" at ")[0])
        current[name].write_bytes(data)
        try:
            status = main([command[0], name, *command[1:]])
            err = capsys.readouterr().err
        finally:
            current[name].write_bytes(originals[name])
        assert status == 2, (what, err)
        lines = err.splitlines()
        assert len(lines) == 1, (what, err)
        assert lines[0].startswith(
            f"iceberg-maint {command[0]}: table '{name}': its metadata file file://{current[name]}"
        )
        assert "nothing was done" in lines[0], (what, err)
        # Damaged, not unreadable: a DamagedMetadataError, which an Airflow task does not retry.
        damaged = ("cannot be parsed", "is not valid table metadata", "lists its manifests inline")
        assert any(phrase in lines[0] for phrase in damaged), (what, err)
        if what == "v1 inline manifests":
            assert "lists its manifests inline ('manifests', format v1)" in lines[0] and "refused" in lines[0]
        assert _files(tmp_path) == before, what

    for path, value in WRONG_TYPES:  # each wrong type every time, besides the drawn cases
        damage = ("db.t", _wrong_type(originals["db.t"], path, value), f"{path} = {value!r}")
        check = example(damage=damage, command=COMMANDS[0])(check)
    check()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("damage", ["truncated", "v1 inline manifests"])
def test_the_installed_command_prints_one_line_without_a_traceback(
    tmp_path: Path, command: tuple[str, ...], damage: str
) -> None:
    current = _tables(tmp_path)
    name = "db.t" if damage == "truncated" else "db.v1"
    original = current[name].read_bytes()
    damaged = original[: len(original) // 2] if damage == "truncated" else _inline_manifests(original)
    current[name].write_bytes(damaged)
    before = _files(tmp_path)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "iceberg-maint"), command[0], name, *command[1:]],
        env={**os.environ, **_env(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert f"table '{name}': its metadata file file://{current[name]}" in done.stderr
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    "command",
    [
        ["due"],
        ["index", "list"],
        ["index", "create", "{t}", "i", "--ordering", "id"],
        ["index", "refresh", "{t}", "i"],
        ["index", "lag", "{t}", "i"],
        ["index", "expire", "{t}", "i"],
        ["index", "remove-unreferenced"],
    ],
    ids=" ".join,
)
def test_every_other_command_reading_the_table_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    current = _tables(tmp_path)["db.t"]
    current.write_bytes(current.read_bytes()[:200])
    before = _files(tmp_path)
    argv = [a.format(t="db.t") for a in command] if "{t}" in command else [*command, "db.t"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and f"table 'db.t': its metadata file file://{current} cannot be parsed" in lines[0]
    assert _files(tmp_path) == before
