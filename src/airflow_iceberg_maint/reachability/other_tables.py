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
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from operator import methodcaller
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.metadata import TableMetadata

from airflow_iceberg_maint.errors import CatalogListingError, UnknownLocationsError
from airflow_iceberg_maint.fs.locations import LocationSet, PathEquivalence, Uri

log = logging.getLogger(__name__)

METADATA_SUFFIXES = (".metadata.json", ".metadata.json.gz")
CATALOG_WORKERS = 8  # concurrent table loads in one catalog pass


@dataclass(frozen=True)
class ProtectedLocation:
    """A location kept whole, and why. ``spellings``: other spellings of it that a listing may use."""

    location: str
    reason: str
    spellings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, str]:
        return {"location": self.location, "reason": self.reason}


#: Table properties that say where a table's files go, with the writers that honour each
#: (docs/safety.md, S8). A table's location, and its ``data`` and ``metadata`` folders, always count.
LOCATION_PROPERTIES = (
    "write.data.path",  # Iceberg Java, pyiceberg, iceberg-rust
    "write.object-storage.path",  # Iceberg Java (deprecated for write.data.path, still read)
    "write.folder-storage.path",  # Iceberg Java (deprecated for write.data.path, still read), iceberg-rust
    "write.metadata.path",  # Iceberg Java, pyiceberg
    "write.index.path",  # this project's indexes (index create --location)
)
#: Properties naming a location provider of the user's own: it may write anywhere.
PROVIDER_PROPERTIES = ("write.location-provider.impl", "write.py-location-provider.impl")


@dataclass(frozen=True)
class TablePaths:
    """Where a table writes: its location, then every path its location properties name.

    ``provider``: the class of a location provider of its own, when it has one (its files may
    lie anywhere, so no scan may assume they are not under its location).
    """

    table: str
    table_uuid: str
    paths: tuple[str, ...]
    provider: str | None = None

    @classmethod
    def of(cls, table: str, metadata: TableMetadata) -> TablePaths:
        props = metadata.properties
        location = metadata.location.rstrip("/")
        written = [props[p].rstrip("/") for p in LOCATION_PROPERTIES if props.get(p)]
        paths = dict.fromkeys([location, f"{location}/data", f"{location}/metadata", *written])
        provider = next((props[p] for p in PROVIDER_PROPERTIES if props.get(p)), None)
        return cls(table, str(metadata.table_uuid), tuple(paths), provider)

    def to_json(self) -> dict[str, Any]:
        body = {"table": self.table, "table_uuid": self.table_uuid, "paths": list(self.paths)}
        return {**body, "provider": self.provider}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TablePaths:
        provider = body.get("provider")
        paths = tuple(str(p) for p in body["paths"])
        return cls(str(body["table"]), str(body["table_uuid"]), paths, None if provider is None else str(provider))


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


def _relative(path: str, root: str, equivalence: PathEquivalence) -> tuple[str, ...] | None:
    """Segments of ``path`` below ``root``, any identity of each; () when it is or holds the root; None when apart."""
    forms = [(path, root)]
    if Uri.parse(root).is_local and Uri.parse(path).is_local:
        forms.append((os.path.realpath(Uri.parse(path).path), os.path.realpath(Uri.parse(root).path)))
    for one, base in forms:
        for a in equivalence.identities(one):
            for b in equivalence.identities(base):
                if a[:2] != b[:2]:
                    continue
                if a[2][: len(b[2])] == b[2]:
                    return a[2][len(b[2]) :]
                if b[2][: len(a[2])] == a[2]:
                    return ()
    return None


def outermost(found: Iterable[ProtectedLocation]) -> list[ProtectedLocation]:
    """One entry per kept tree: the first reason for a location, none for locations inside another.

    The spellings of an entry left out (and its location) join those of the entry holding it,
    so nothing that any of them keeps is lost.
    """
    by_location: dict[str, tuple[ProtectedLocation, set[str]]] = {}
    for protected in found:
        key = protected.location.rstrip("/")
        _, spellings = by_location.setdefault(key, (protected, set()))
        spellings.update({protected.location, *protected.spellings} - {key})
    locations = sorted(by_location)
    kept: dict[str, set[str]] = {}
    for location in locations:
        outer = next((o for o in locations if location.startswith(o + "/")), location)
        kept.setdefault(outer, set()).update(by_location[location][1] | ({location} - {outer}))
    return [
        replace(by_location[outer][0], spellings=tuple(sorted(spellings - {by_location[outer][0].location})))
        for outer, spellings in kept.items()
    ]


def _spelled_under(root: str, relative: tuple[str, ...]) -> str:
    return "/".join((root.rstrip("/"), *relative))


def _spelling_under(path: str, root: str) -> str | None:
    """``path`` as written, when it is spelled as the root plus more (an S3 key keeps its ``//``)."""
    root = root.rstrip("/")
    return path if path == root or path.startswith(root + "/") else None


def catalog_protections(
    others: Iterable[TablePaths], table_uuid: str, table_name: str, root: str, equivalence: PathEquivalence
) -> list[ProtectedLocation]:
    """Locations under ``root`` that other tables of the catalog write to (S8).

    Each is reported as the other table spells it when that spelling starts with the root's,
    else spelled under the root; either way every spelling is kept (``protection_set``).
    Raises ``UnknownLocationsError`` for another table with a location provider of its own.
    """
    found: list[ProtectedLocation] = []
    for other in others:
        if other.table == table_name and other.table_uuid == table_uuid:
            continue
        if other.provider:
            raise UnknownLocationsError(
                f"table {other.table}: writes through its own location provider {other.provider!r}, so its files "
                f"may lie under {root!r}; nothing was deleted. If the location holds this table only, say so with "
                "only_this_table (--only-this-table)"
            )
        location, *write_paths = other.paths
        candidates = [(location, False), *((p, True) for p in write_paths)]
        for path, holds_files in candidates:
            relative = _relative(path, root, equivalence)
            if relative is None:
                continue
            below = bool(relative) or _relative(root, path, equivalence) == ()
            if not below and not holds_files:
                continue  # a location above the root: only its data and metadata paths hold files
            under_root = _spelled_under(root, relative)
            spelled = (_spelling_under(path, root) if relative else None) or under_root
            reason = f"table {other.table} writes under {path!r}"
            found.append(ProtectedLocation(spelled, reason, tuple({path, under_root} - {spelled})))
    return outermost(found)


def protection_set(protected: Iterable[ProtectedLocation], equivalence: PathEquivalence) -> LocationSet:
    """Every spelling of every kept location, compared with listed files by identity (S8)."""
    return LocationSet((s for p in protected for s in (p.location, *p.spellings)), equivalence)


def _is_this_tables(
    io: FileIO, metadata_file: str, table_uuid: str, table_location: str, equivalence: PathEquivalence
) -> bool:
    """Whether an unreferenced metadata file is this table's own (stale) or one of its indexes'."""
    try:
        with io.new_input(metadata_file).open() as f:
            body = json.loads(f.read())
    except Exception as exc:  # gzip, unreadable, not JSON: it may be another table's, keep it
        log.info("metadata file %s: not read (%s); its directory is kept", metadata_file, exc)
        return False
    if not isinstance(body, dict) or str(body.get("table-uuid")) != table_uuid:
        return False
    if "index-uuid" in body:
        return True
    location = str(body.get("location", ""))
    return not set(equivalence.identities(location)).isdisjoint(equivalence.identities(table_location))


def listed_table_protections(
    metadata_files: Sequence[str],
    referenced: Sequence[bool],
    io: FileIO,
    table_uuid: str,
    table_location: str,
    equivalence: PathEquivalence,
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
        if not _is_this_tables(io, newest, table_uuid, table_location, equivalence):
            protected.append(ProtectedLocation(root, f"holds the metadata of another table ({newest})"))
    return protected


def is_listed_metadata_file(path: str) -> bool:
    head, _, name = path.rpartition("/")
    return name.endswith(METADATA_SUFFIXES) and head.endswith("/metadata")


def listed_metadata_files(paths: Iterable[str]) -> list[str]:
    """The paths ``is_listed_metadata_file`` accepts; the suffix is tested in C first (most paths fail it)."""
    return [p for p in filter(methodcaller("endswith", METADATA_SUFFIXES), paths) if is_listed_metadata_file(p)]
