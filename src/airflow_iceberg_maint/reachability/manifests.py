"""Reading file paths out of manifest lists and manifests, and nothing else.

Only the paths (and a manifest entry's ``status``) are read; the partition tuples, summaries and
column metrics that make ``inspect.all_files()`` slow are skipped, by the plans of ``avro_plans``
(compiled from the writer's schema in each file's header).

A damaged file is a ``MetadataReadError``, never a crash (S2); only a file cut exactly at a block
boundary cannot be told from a whole one (an Avro container has no footer). The container is
read here: its header, then each block, checked against its sync marker and read by the plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus

from airflow_iceberg_maint.errors import MetadataReadError
from airflow_iceberg_maint.pyiceberg_compat import AVRO_CODECS, avro_decoder
from airflow_iceberg_maint.reachability.avro_plans import Damaged, Want, record_plan
from airflow_iceberg_maint.reachability.digest_deltas import Entries
from airflow_iceberg_maint.reachability.digests import DigestStore, identity

log = logging.getLogger(__name__)

_MANIFEST_LIST: Want = {500: None}  # manifest_path
_MANIFEST: Want = {0: None, 2: {100: None}}  # status, data_file.file_path
_MANIFEST_LIST_SIZED: Want = {500: None, 501: None}  # manifest_path, manifest_length
_MANIFEST_SIZED: Want = {0: None, 2: {100: None, 104: None}}  # status, data_file.file_path, file_size_in_bytes
#: status, data_file.file_path, file_format, content; a v1 manifest has no content (data files only)
_MANIFEST_KINDS: Want = {0: None, 2: {100: None, 101: None, 134: None}}
_MANIFEST_KINDS_V1: Want = {0: None, 2: {100: None, 101: None}}
_CONTENT = 134
_DELETED = int(ManifestEntryStatus.DELETED)
PATH_CHUNK = 20_000  # live paths of a manifest decoded and hashed together, at most
_MAGIC = b"Obj\x01"
_SYNC_SIZE = 16


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Damaged("a number runs past the end of the file")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _slice(data: bytes, pos: int, size: int) -> tuple[bytes, int]:
    if size < 0 or pos + size > len(data):
        raise Damaged("the file ends inside a value")
    return data[pos : pos + size], pos + size


def _header(data: bytes) -> tuple[dict[str, bytes], bytes, int]:
    """The container's metadata, its sync marker, and where its first block starts."""
    if data[:4] != _MAGIC:
        raise Damaged("not an Avro container file")
    meta: dict[str, bytes] = {}
    count, pos = _varint(data, 4)
    while count:
        if count < 0:
            count = -count
            _, pos = _varint(data, pos)
        for _ in range(count):
            size, pos = _varint(data, pos)
            key, pos = _slice(data, pos, size)
            size, pos = _varint(data, pos)
            meta[key.decode("utf-8")], pos = _slice(data, pos, size)
        count, pos = _varint(data, pos)
    sync, pos = _slice(data, pos, _SYNC_SIZE)
    return meta, sync, pos


def _records(data: bytes, name: str, want: Want) -> Iterator[list[Any]]:
    meta, sync, pos = _header(data)
    codec_name = meta.get("avro.codec", b"null").decode("utf-8")
    if codec_name not in AVRO_CODECS:
        raise Damaged(f"unknown Avro codec {codec_name!r}")
    codec = AVRO_CODECS[codec_name]
    if "avro.schema" not in meta:
        raise Damaged("no schema in the file's header")
    read, padding = record_plan(meta["avro.schema"], name, want)
    while pos < len(data):
        count, pos = _varint(data, pos)
        size, pos = _varint(data, pos)
        block, pos = _slice(data, pos, size)
        marker, pos = _slice(data, pos, _SYNC_SIZE)
        if marker != sync:
            raise Damaged("a block does not end with the file's sync marker")
        if codec is not None:
            block = codec.decompress(block)
        end = len(block)
        if not 0 <= count <= end or end + len(padding) >= 1 << 32:  # a record takes a byte at least
            raise Damaged(f"a block of {end} bytes cannot hold {count} records")
        decoder = avro_decoder(block + padding)
        for _ in range(count):
            record = read(decoder, end)
            if decoder.tell() > end:
                raise Damaged("a record runs past the end of its block")
            yield record
        if decoder.tell() != end:
            raise Damaged(f"{end - decoder.tell()} bytes left after a block's last record")


def _bytes(io: FileIO, path: str) -> bytes:
    with io.new_input(path).open() as f:
        return f.read()


def _read(io: FileIO, path: str, name: str, want: Want) -> Iterator[list[Any]]:
    return _records(_bytes(io, path), name, want)


def _sync(data: bytes) -> bytes:
    return _header(data)[1]


def _stored(io: FileIO, path: str, kind: str) -> tuple[int, Entries] | None:
    """The file's length and its digest's entries when ``io`` has a digest store holding the file's
    digest and the file's identity matches it (S22), else None.

    ``kind`` "list": [manifest path, length] a manifest; "manifest": [path, size] a live entry.
    """
    store = DigestStore.of(io)
    if store is None or (stored := store.read(kind, path)) is None:
        return None
    try:
        if identity(io, path, _sync) == stored[0]:
            store.touch(kind, path)
            return stored[0][0], stored[1]
        log.info("digest cache: %s is not the file its digest was made from; reading it", path)
    except Exception as exc:  # the file is read by the caller, where its read error aborts
        log.info("digest cache: cannot read the identity of %s (%s); reading it", path, exc)
    return None


def _cached(io: FileIO, path: str, kind: str) -> tuple[int, Entries] | None:
    """``_stored``, else the file read (its read errors raise as without a store) and its digest
    stored; None when ``io`` has no digest store."""
    store = DigestStore.of(io)
    if store is None:
        return None
    if (stored := _stored(io, path, kind)) is not None:
        return stored
    data = _bytes(io, path)
    if kind == "list":
        named = [(e[0], e[1]) for e in _records(data, "list+length", _MANIFEST_LIST_SIZED)]
    else:
        records = _records(data, "manifest+size", _MANIFEST_SIZED)
        named = [(e[1][0], e[1][1]) for e in records if e[0] != _DELETED]
    entries: Entries = ([p for p, _ in named], [s for _, s in named])
    store.write(kind, path, (len(data), _sync(data)), entries)
    return len(data), entries


def manifest_paths(io: FileIO, manifest_list: str) -> list[str]:
    """The manifest paths a manifest list names. Any read error aborts (S2)."""
    try:
        if (cached := _cached(io, manifest_list, "list")) is not None:
            return cached[1][0]
        return [entry[0] for entry in _read(io, manifest_list, "list", _MANIFEST_LIST)]
    except Exception as exc:
        raise MetadataReadError(f"manifest list {manifest_list!r}: cannot be read ({exc})") from exc


def unique_manifest_paths(
    io: FileIO, manifest_lists: Iterable[str], map_: Callable[..., Iterable[list[str]]] = map
) -> list[str]:
    """The manifests the manifest lists name, each once, in first-seen order.

    ``map_`` runs the reads (the built-in ``map``, or a thread pool's to overlap network reads).
    """
    return list(dict.fromkeys(m for ms in map_(lambda ml: manifest_paths(io, ml), manifest_lists) for m in ms))


def live_file_paths(io: FileIO, manifest: str) -> list[str]:
    """Paths of the live (ADDED or EXISTING) entries of a manifest: data, delete and DV files.

    A DELETED entry does not pin its file: a file removed in snapshot N stays referenced only
    while a retained snapshot still lists it live (Iceberg Java's rule).
    """
    return list(chain.from_iterable(live_file_path_chunks(io, manifest)))


def live_file_path_chunks(io: FileIO, manifest: str, size: int | None = None) -> Iterator[list[str]]:
    """``live_file_paths`` ``size`` at a time, decoded as they are taken: a large manifest is never held whole.

    One chunk at least (empty for a manifest with no live entry). A read error raises when it is
    met, after the chunks before it: the caller aborts (S2).
    """
    try:
        size = size or PATH_CHUNK
        if (cached := _cached(io, manifest, "manifest")) is not None:
            paths = cached[1][0]
            yield from (paths[i : i + size] for i in range(0, max(len(paths), 1), size))
            return
        live = (entry[1][0] for entry in _read(io, manifest, "manifest", _MANIFEST) if entry[0] != _DELETED)
        chunk = list(islice(live, size))
        while True:
            yield chunk
            chunk = list(islice(live, size))
            if not chunk:
                return
    except Exception as exc:
        raise MetadataReadError(f"manifest {manifest!r}: cannot be read ({exc})") from exc


# With sizes: what snapshot expiry reports as freed bytes, read in the same pass as the paths.


def sized_manifest_paths(io: FileIO, manifest_list: str) -> tuple[int, Entries]:
    """The manifest list's own size, and the manifests it names with their lengths. Any read error aborts (S2)."""
    try:
        if (cached := _cached(io, manifest_list, "list")) is not None:
            return cached
        data = _bytes(io, manifest_list)
        records = list(_records(data, "list+length", _MANIFEST_LIST_SIZED))
        return len(data), ([entry[0] for entry in records], [entry[1] for entry in records])
    except Exception as exc:
        raise MetadataReadError(f"manifest list {manifest_list!r}: cannot be read ({exc})") from exc


def sized_live_file_paths(io: FileIO, manifest: str) -> list[tuple[str, int]]:
    """``live_file_paths`` with each file's ``file_size_in_bytes``."""
    try:
        if (cached := _cached(io, manifest, "manifest")) is not None:
            return list(zip(*cached[1], strict=True))
        return [
            (entry[1][0], entry[1][1])
            for entry in _read(io, manifest, "manifest+size", _MANIFEST_SIZED)
            if entry[0] != _DELETED
        ]
    except Exception as exc:
        raise MetadataReadError(f"manifest {manifest!r}: cannot be read ({exc})") from exc


def stored_manifest_lists(
    io: FileIO, manifest_lists: list[str], map_: Callable[..., Iterable[tuple[int, Entries] | None]] = map
) -> dict[str, tuple[int, Entries]]:
    """The manifest lists the digest store holds (``sized_manifest_paths`` of each, S22); the others
    are left out, unread. ``map_`` runs the look-ups (threads on object stores)."""
    found = map_(lambda manifest_list: _stored(io, manifest_list, "list"), manifest_lists)
    return {path: held for path, held in zip(manifest_lists, found, strict=True) if held is not None}


# With what each file is: what snapshot expiry reports about the files it deletes.


def live_file_contents(io: FileIO, manifest: str) -> list[tuple[str, int, str]]:
    """Each live entry's path, content (0 data, 1 position deletes, 2 equality deletes) and file format.

    A manifest whose ``data_file`` has no ``content`` field (a v1 manifest) holds data files only.
    """
    try:
        data = _bytes(io, manifest)
        try:
            entries = list(_records(data, "manifest+kinds", _MANIFEST_KINDS))
        except Damaged as exc:
            if f"no field with id {_CONTENT}" not in str(exc):
                raise
            entries = [[e[0], [e[1][0], e[1][1], 0]] for e in _records(data, "manifest+kinds-v1", _MANIFEST_KINDS_V1)]
        return [(e[1][0], e[1][2], e[1][1]) for e in entries if e[0] != _DELETED]
    except Exception as exc:
        raise MetadataReadError(f"manifest {manifest!r}: cannot be read ({exc})") from exc
