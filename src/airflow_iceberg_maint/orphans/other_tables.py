"""Other tables whose files lie under a scan location: found, and kept whole (S8 in docs/safety.md).

Iceberg Java deletes them: a table nested in another's location (``<outer>/data/inner``), or
one whose ``write.data.path`` points under it, looks like a heap of orphans to the outer
table. Two sources find them here:

- the listing itself: a directory ``D/metadata`` holding a ``*.metadata.json`` that is not
  this table's (of this catalog or any other) makes ``D`` another table's location;
- the catalog: every other table whose location or write paths lie under the scan location
  (or whose data or metadata path holds the scan location, which protects all of it).

A catalog pass loads every table once, so it is made once per DAG run (or command) and handed
to every table cleaned in it (saved with ``save_table_paths``). A later pass given the earlier
one as ``known`` lists the catalog again but loads only the tables created since: on a catalog
of 10,000 tables a cleaned table costs one listing of each namespace, not 10,000 table loads.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from operator import methodcaller
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.errors import CatalogListingError
from airflow_iceberg_maint.fs.locations import PathEquivalence, Uri

log = logging.getLogger(__name__)

METADATA_SUFFIXES = (".metadata.json", ".metadata.json.gz")
CATALOG_WORKERS = 8  # concurrent table loads in one catalog pass


@dataclass(frozen=True)
class ProtectedLocation:
    """A location kept whole, and why."""

    location: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"location": self.location, "reason": self.reason}


@dataclass(frozen=True)
class TablePaths:
    """Where a table writes: its location, data path and metadata path."""

    table: str
    table_uuid: str
    paths: tuple[str, ...]

    @classmethod
    def of(cls, table: str, metadata: TableMetadata) -> TablePaths:
        props = metadata.properties
        location = metadata.location.rstrip("/")
        data = props.get("write.data.path") or props.get("write.object-storage.path") or f"{location}/data"
        meta = props.get("write.metadata.path") or f"{location}/metadata"
        return cls(table, str(metadata.table_uuid), (location, data.rstrip("/"), meta.rstrip("/")))

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "table_uuid": self.table_uuid, "paths": list(self.paths)}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TablePaths:
        return cls(str(body["table"]), str(body["table_uuid"]), tuple(str(p) for p in body["paths"]))


def _identifiers(catalog: Catalog) -> list[tuple[str, ...]]:
    """Every table identifier, through nested namespaces (each namespace listed once)."""
    found: list[tuple[str, ...]] = []
    seen: set[tuple[str, ...]] = {()}
    pending: list[tuple[str, ...]] = [()]
    while pending:
        namespace = pending.pop()
        for child in map(tuple, catalog.list_namespaces(namespace)):
            if child not in seen:
                seen.add(child)
                pending.append(child)
        if namespace:
            found.extend(tuple(t) for t in catalog.list_tables(namespace))
    return found


def catalog_table_paths(
    catalog: Catalog, known: Sequence[TablePaths] = (), workers: int = CATALOG_WORKERS
) -> list[TablePaths]:
    """Every table of the catalog with its paths; tables not in ``known`` are loaded, concurrently.

    Raises ``CatalogListingError`` when the catalog cannot be listed or a table cannot be loaded:
    an unknown table could be anywhere, so the caller must not assume there is none.
    """
    by_name = {paths.table: paths for paths in known}

    def load(identifier: tuple[str, ...]) -> TablePaths | None:
        try:
            return TablePaths.of(".".join(identifier), catalog.load_table(identifier).metadata)
        except NoSuchTableError:
            return None  # dropped since it was listed

    try:
        identifiers = _identifiers(catalog)
        new = [i for i in identifiers if ".".join(i) not in by_name]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            loaded = list(pool.map(load, new))
    except Exception as exc:
        raise CatalogListingError(
            f"catalog {catalog.name!r}: its tables cannot be listed to find tables nested under the scan location "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    log.info(
        "catalog %s: %d tables listed, %d loaded, to find tables nested under scan locations",
        catalog.name,
        len(identifiers),
        len(new),
    )
    still = [by_name[".".join(i)] for i in identifiers if ".".join(i) in by_name]
    return still + [paths for paths in loaded if paths is not None]


def save_table_paths(uri: str, paths: Sequence[TablePaths], io_properties: dict[str, str]) -> str:
    """Write a catalog pass where the tables cleaned in the same run can read it (local or object storage)."""
    if uri.startswith("file://"):
        os.makedirs(os.path.dirname(uri.removeprefix("file://")), exist_ok=True)
    body = json.dumps({"tables": [p.to_json() for p in paths]}).encode("utf-8")
    with load_file_io(io_properties, uri).new_output(uri).create(overwrite=True) as out:
        out.write(body)
    return uri


def load_table_paths(uri: str, io_properties: dict[str, str]) -> list[TablePaths]:
    """A saved catalog pass; raises ``CatalogListingError`` when it cannot be read."""
    try:
        with load_file_io(io_properties, uri).new_input(uri).open() as f:
            return [TablePaths.from_json(t) for t in json.loads(f.read())["tables"]]
    except Exception as exc:
        raise CatalogListingError(f"catalog pass {uri!r}: cannot be read ({type(exc).__name__}: {exc})") from exc


def _parts(path: str, equivalence: PathEquivalence) -> tuple[str, str, tuple[str, ...]]:
    uri = Uri.parse(path)
    segments = tuple(s for s in posixpath.normpath("/" + uri.path).split("/") if s)
    return equivalence.scheme(uri.scheme), equivalence.authority(uri.authority), segments


def _relative(path: str, root: str, equivalence: PathEquivalence) -> tuple[str, ...] | None:
    """Segments of ``path`` below ``root``; () when it is the root or holds it; None when apart."""
    forms = [(path, root)]
    if Uri.parse(root).is_local and Uri.parse(path).is_local:
        forms.append((os.path.realpath(Uri.parse(path).path), os.path.realpath(Uri.parse(root).path)))
    for one, base in forms:
        a, b = _parts(one, equivalence), _parts(base, equivalence)
        if a[:2] != b[:2]:
            continue
        if a[2][: len(b[2])] == b[2]:
            return a[2][len(b[2]) :]
        if b[2][: len(a[2])] == a[2]:
            return ()
    return None


def outermost(found: Iterable[ProtectedLocation]) -> list[ProtectedLocation]:
    """One entry per kept tree: the first reason for a location, none for locations inside another."""
    by_location: dict[str, ProtectedLocation] = {}
    for protected in found:
        by_location.setdefault(protected.location.rstrip("/"), protected)
    locations = sorted(by_location)
    return [
        by_location[loc]
        for loc in locations
        if not any(loc.startswith(other + "/") for other in locations if other != loc)
    ]


def _spelled_under(root: str, relative: tuple[str, ...]) -> str:
    return "/".join((root.rstrip("/"), *relative))


def catalog_protections(
    others: Iterable[TablePaths], table_uuid: str, table_name: str, root: str, equivalence: PathEquivalence
) -> list[ProtectedLocation]:
    """Locations under ``root`` (spelled like it) that other tables of the catalog write to."""
    found: list[ProtectedLocation] = []
    for other in others:
        if other.table == table_name and other.table_uuid == table_uuid:
            continue
        location, *write_paths = other.paths
        candidates = [(location, False), *((p, True) for p in write_paths)]
        for path, holds_files in candidates:
            relative = _relative(path, root, equivalence)
            if relative is None:
                continue
            below = bool(relative) or _parts(path, equivalence)[2] == _parts(root, equivalence)[2]
            if not below and not holds_files:
                continue  # a location above the root: only its data and metadata paths hold files
            spelled = _spelled_under(root, relative)
            found.append(ProtectedLocation(spelled, f"table {other.table} writes under {path!r}"))
    return outermost(found)


def _is_this_tables(io: FileIO, metadata_file: str, table_uuid: str, table_location: str) -> bool:
    """Whether an unreferenced metadata file is this table's own (stale) or one of its indexes'."""
    try:
        with io.new_input(metadata_file).open() as f:
            body = json.loads(f.read())
    except Exception as exc:  # gzip, unreadable, not JSON: it may be another table's, keep it
        log.info("metadata file %s: not read (%s); its directory is kept", metadata_file, exc)
        return False
    if not isinstance(body, dict) or str(body.get("table-uuid")) != table_uuid:
        return False
    return "index-uuid" in body or str(body.get("location", "")).rstrip("/") == table_location.rstrip("/")


def listed_table_protections(
    metadata_files: Sequence[str],
    referenced: Sequence[bool],
    io: FileIO,
    table_uuid: str,
    table_location: str,
) -> list[ProtectedLocation]:
    """Directories ``D`` whose ``D/metadata`` holds a table metadata file that is not this table's.

    ``metadata_files`` are listed ``*.metadata.json`` files directly in a ``metadata`` folder;
    ``referenced`` says which of them this table references (then ``D`` is this table or one of
    its indexes).
    """
    by_root: dict[str, list[tuple[str, bool]]] = {}
    for path, hit in zip(metadata_files, referenced, strict=True):
        by_root.setdefault(path.rsplit("/", 2)[0], []).append((path, hit))
    protected = []
    for root, files in sorted(by_root.items()):
        if any(hit for _, hit in files):
            continue
        newest = max(path for path, _ in files)
        if not _is_this_tables(io, newest, table_uuid, table_location):
            protected.append(ProtectedLocation(root, f"holds the metadata of another table ({newest})"))
    return protected


def is_listed_metadata_file(path: str) -> bool:
    head, _, name = path.rpartition("/")
    return name.endswith(METADATA_SUFFIXES) and head.endswith("/metadata")


def listed_metadata_files(paths: Iterable[str]) -> list[str]:
    """The paths ``is_listed_metadata_file`` accepts; the suffix is tested in C first (most paths fail it)."""
    return [p for p in filter(methodcaller("endswith", METADATA_SUFFIXES), paths) if is_listed_metadata_file(p)]
