"""Reading file paths out of manifest lists and manifests, and nothing else.

Only the paths (and a manifest entry's ``status``) are projected, so the Avro reader skips
the partition tuples, summaries and column metrics that make ``inspect.all_files()`` slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from pyiceberg.avro.decoder import BinaryDecoder, new_decoder
from pyiceberg.avro.file import AvroFile
from pyiceberg.avro.reader import IntegerReader, Reader, StructReader
from pyiceberg.avro.resolver import ReadSchemaResolver, SchemaPartnerAccessor
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.schema import Schema, visit_with_partner
from pyiceberg.typedef import Record
from pyiceberg.types import IcebergType, IntegerType, ListType, MapType, NestedField, StringType, StructType

from airflow_iceberg_maint.errors import MetadataReadError

_PATHS_SCHEMA = Schema(
    NestedField(0, "status", IntegerType(), required=True),
    NestedField(2, "data_file", StructType(NestedField(100, "file_path", StringType(), required=True)), required=True),
)
_MANIFEST_LIST_SCHEMA = Schema(NestedField(500, "manifest_path", StringType(), required=True))
_DELETED = int(ManifestEntryStatus.DELETED)


class _ProjectingAccessor(SchemaPartnerAccessor):
    """Lets the resolver skip maps, lists and structs that the read schema leaves out.

    pyiceberg's own accessor insists that every map and list of the file has a partner.
    """

    def field_partner(self, partner: IcebergType | None, field_id: int, field_name: str) -> IcebergType | None:
        return None if partner is None else super().field_partner(partner, field_id, field_name)

    def list_element_partner(self, partner_list: IcebergType | None) -> IcebergType | None:
        return partner_list.element_type if isinstance(partner_list, ListType) else None

    def map_key_partner(self, partner_map: IcebergType | None) -> IcebergType | None:
        return partner_map.key_type if isinstance(partner_map, MapType) else None

    def map_value_partner(self, partner_map: IcebergType | None) -> IcebergType | None:
        return partner_map.value_type if isinstance(partner_map, MapType) else None


def _skip_ints(count: int) -> Callable[[BinaryDecoder], Any]:
    return lambda decoder: decoder.read_ints(count)


class _CoalescedStruct(Reader):
    """A struct reader that skips a run of int/long fields with one call instead of one each.

    Manifest lists are mostly runs of counters nobody here needs; this is most of their cost.
    """

    def __init__(self, struct: StructReader) -> None:
        plan: list[tuple[int | None, Callable[[BinaryDecoder], Any]]] = []
        run = 0
        for pos, reader in struct.field_readers:
            if pos is None and isinstance(reader, IntegerReader):
                run += 1
                continue
            if run:
                plan.append((None, _skip_ints(run)))
                run = 0
            if pos is None:
                plan.append((None, reader.skip))
            else:
                plan.append((pos, _coalesce(reader).read))
        if run:
            plan.append((None, _skip_ints(run)))
        self._plan = tuple(plan)
        self._create = struct.create_struct
        self._size = 1 + max((pos for pos, _ in struct.field_readers if pos is not None), default=-1)

    def read(self, decoder: BinaryDecoder) -> Any:
        struct = self._create(*[None] * self._size)
        for pos, step in self._plan:
            if pos is None:
                step(decoder)
            else:
                struct[pos] = step(decoder)
        return struct

    def skip(self, decoder: BinaryDecoder) -> None:
        for _, step in self._plan:
            step(decoder)


def _coalesce(reader: Reader) -> Reader:
    return _CoalescedStruct(reader) if isinstance(reader, StructReader) else reader


class _ProjectedAvroFile(AvroFile[Record]):
    """An Avro container file read through a projection that may drop nested fields.

    Resolving a reader costs far more than decoding a small manifest, and a table's manifests
    share a handful of file schemas: readers are cached by (file schema, read schema).
    """

    _readers: ClassVar[dict[tuple[str, int], Any]] = {}

    def __enter__(self) -> _ProjectedAvroFile:
        with self.input_file.open() as f:
            self.decoder = new_decoder(f.read())
        self.header = self._read_header()
        cache_key = (self.header.meta.get("avro.schema", ""), id(self.read_schema))
        reader = self._readers.get(cache_key)
        if reader is None:
            if len(self._readers) >= 256:  # many tables with many schemas: start over rather than grow
                self._readers.clear()
            self.schema = self.header.get_schema()
            resolver: Any = ReadSchemaResolver()
            reader = _coalesce(visit_with_partner(self.schema, self.read_schema, resolver, _ProjectingAccessor()))
            self._readers[cache_key] = reader
        self.reader = reader
        return self


def manifest_paths(io: FileIO, manifest_list: str) -> list[str]:
    """The manifest paths a manifest list names. Any read error aborts (S2)."""
    try:
        with _ProjectedAvroFile(io.new_input(manifest_list), _MANIFEST_LIST_SCHEMA) as reader:
            return [entry[0] for entry in reader]
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
    try:
        with _ProjectedAvroFile(io.new_input(manifest), _PATHS_SCHEMA) as reader:
            return [entry[1][0] for entry in reader if entry[0] != _DELETED]
    except Exception as exc:
        raise MetadataReadError(f"manifest {manifest!r}: cannot be read ({exc})") from exc
