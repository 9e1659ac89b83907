"""Property: another table's files under a scan location survive, however its paths are spelled (S8).

Hypothesis draws a history for table A and, for a second table B of the same catalog, which of
B's location properties points under A's data folder and how it is spelled relative to A: ``//``,
a scheme alias (``s3a``, ``gcs``, ``wasbs``...), the host in capitals, an Azure Blob host for a
Data Lake one, a ``.`` segment, a percent-encoded character, a trailing ``/``, and mixes of
them. B is registered in the catalog with metadata as another writer (Iceberg Java, iceberg-rust)
leaves it; its files are planted where a writer following that spelling puts them on the store
(S3 and GCS keep ``//`` and ``.`` in keys, Azure keeps ``//``, a local disk folds both). A's
orphans are planted beside them, some under names that share B's folder name as a prefix.

The oracle is the plan itself: exactly A's planted orphans are deleted, every file of B stays,
and every snapshot of A still reads its rows. It runs on the local disk, S3 (moto), GCS
(gcp-storage-emulator) and Azure (Azurite), single-task and sharded.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import Catalog
from pyiceberg.io import load_file_io
from pyiceberg.table import Table

from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.index.lifecycle.references import INDEX_FILES
from airflow_iceberg_maint.orphans.options import OrphanOptions
from airflow_iceberg_maint.orphans.removal import remove_orphan_files
from airflow_iceberg_maint.orphans.sharded.scan import remove_orphan_files_sharded
from tests.orphans.scenario import SCHEMA, Files, rows, snapshot_row_counts
from tests.reliability.figures import report, scale
from tests.reliability.histories import write_history

pytestmark = pytest.mark.reliability

PROFILE = settings(
    max_examples=scale(4, 40),
    deadline=None,
    derandomize=not scale(0, 1),
    suppress_health_check=list(__import__("hypothesis").HealthCheck),
)

STORES = {"local": "sqlite_catalog", "s3": "s3_catalog", "gcs": "gcs_catalog", "azure": "azure_catalog"}
PROPERTIES = ["location", "write.data.path", "write.folder-storage.path", "write.object-storage.path"]
PROPERTIES += ["write.metadata.path"]
SPELLINGS = ["double_slash", "scheme_alias", "host_case", "blob_host", "dot_segment", "percent", "trailing_slash"]
ALIASES = {"s3": ["s3a", "s3n"], "gs": ["gcs"], "abfs": ["abfss", "wasb", "wasbs"], "file": ["", "file"]}
# Stores whose keys keep "//" as written, and those that keep "." segments too; a local disk folds
# both, and Azure's clients fold "." segments out of a blob's URL (so no writer can keep one there).
LITERAL_SLASHES = {"s3", "gcs", "azure"}
LITERAL_DOTS = {"s3", "gcs"}


@dataclass
class Spelled:
    """B's path under A, as B's property spells it, and the object paths a writer following it creates."""

    text: str
    objects: list[str] = field(default_factory=list)


def _head(uri: Uri) -> str:
    return f"{uri.scheme}://{uri.authority}" if uri.scheme else ""


def spell(store: str, a_location: str, name: str, spellings: list[str], alias: int) -> Spelled:
    """B's folder ``<A>/data/<name>`` spelled with each of ``spellings``; its object paths on the store."""
    uri = Uri.parse(a_location)
    below = ["data", name]
    scheme, authority = uri.scheme, uri.authority
    segments_written = list(below)
    objects_below = [list(below)]
    suffix = ""
    for spelling in spellings:
        if spelling == "double_slash":
            segments_written[0] += "/"  # <A>/data//<name>
            if store in LITERAL_SLASHES:
                objects_below = [[s + "/" if s == "data" else s for s in o] for o in objects_below]
        elif spelling == "dot_segment":
            segments_written.insert(1, ".")
            if store in LITERAL_DOTS:
                objects_below = [[o[0], ".", *o[1:]] for o in objects_below]
        elif spelling == "percent":
            segments_written[-1] = "%" + format(ord(name[0]), "02X") + name[1:]
            # A writer that keeps the text literally, and one that decodes it: both are B's.
            objects_below = [[*o[:-1], segments_written[-1]] for o in objects_below] + objects_below
        elif spelling == "trailing_slash":
            suffix = "/"
        elif spelling == "scheme_alias":
            choices = ALIASES[scheme or "file"]
            scheme = choices[alias % len(choices)]
        elif spelling == "host_case":
            authority = authority.upper()
        elif spelling == "blob_host" and store == "azure":
            authority = authority.replace(".dfs.", ".blob.")
    a_path = uri.path.rstrip("/")
    text_head = f"{scheme}://{authority}" if scheme else ""
    if store == "local" and scheme == "file":
        text_head = "file://"
    text = f"{text_head}{a_path}/" + "/".join(segments_written) + suffix
    head = _head(uri) if uri.scheme else ""
    objects = [f"{head}{a_path}/" + "/".join(o) for o in objects_below]
    return Spelled(text, objects)


def _register_other_writer(catalog: Catalog, name: str, spelled: Spelled, prop: str, elsewhere: str) -> Table:
    """Table ``name`` whose ``prop`` is the spelled path, registered as another writer's metadata would be.

    It is created and written at ``elsewhere`` by pyiceberg, then its metadata is written again with the
    location properties of the draw (the catalog loads it from there, as from any other writer).
    """
    staging = catalog.create_table(f"{name}_w", schema=SCHEMA, location=elsewhere)
    staging.append(rows(0, 4))
    staging = catalog.load_table(f"{name}_w")
    body: dict[str, Any] = json.loads(staging.metadata.model_dump_json(by_alias=True))
    props = {"write.metadata.path": f"{elsewhere}/metadata", "write.data.path": f"{elsewhere}/data"}
    if prop == "location":
        body["location"] = spelled.text
    else:
        props[prop] = spelled.text
    body["properties"] = {**body.get("properties", {}), **props}
    metadata_file = f"{elsewhere}/metadata/99999-{uuid.uuid4()}.metadata.json"
    with load_file_io(staging.io.properties, metadata_file).new_output(metadata_file).create() as out:
        out.write(json.dumps(body).encode())
    catalog.drop_table(f"{name}_w")
    return catalog.register_table(name, metadata_file)


def check(catalog: Catalog, store: str, draw: dict[str, Any], figures: dict[str, int]) -> None:
    tag = uuid.uuid4().hex[:8]
    a = catalog.create_table(f"db.a_{tag}", schema=SCHEMA)
    write_history(a, draw["ops"])
    a = catalog.load_table(f"db.a_{tag}")
    files = Files(a)
    a_loc = a.location().rstrip("/")
    name = f"b{tag}"
    spelled = spell(store, a_loc, name, draw["spellings"], draw["alias"])
    elsewhere = f"{a_loc.rsplit('/', 1)[0]}/elsewhere_{tag}"
    _register_other_writer(catalog, f"db.b_{tag}", spelled, draw["property"], elsewhere)

    b_files = {
        files.put(f"{obj}/{sub}00000-b-{i}.parquet", b"b")
        for obj in spelled.objects
        for sub in ("", "x/")
        for i in (0, 1)
    }
    orphans = {
        files.put(f"{a_loc}/data/orphan-{tag}.parquet"),
        files.put(f"{a_loc}/data/{name}x/o.parquet"),  # shares B's folder name as a prefix only
        files.put(f"{a_loc}/data/{name}.parquet"),
        files.put(f"{a_loc}/metadata/o-{tag}.avro"),
    }
    before = files.all_files(a_loc)
    counts = snapshot_row_counts(a)
    now = datetime.now(UTC) + timedelta(seconds=5)
    options = OrphanOptions(older_than=now)
    if draw["sharded"]:
        scratch = f"{a_loc.rsplit('/', 1)[0]}/scratch_{tag}"
        props = dict(a.io.properties)
        done = remove_orphan_files_sharded(
            a, options, shards=2, scratch=scratch, io_properties=props, sources=[INDEX_FILES], now=now
        )
    else:
        done = remove_orphan_files(a, options, sources=[INDEX_FILES], now=now)
    after = files.all_files(a_loc)
    context = f"store={store} draw={draw} spelled={spelled.text!r}"
    assert set(done.orphan_files) == orphans, context
    assert before - after == orphans, context
    assert all(files.exists(p) for p in b_files), context
    assert snapshot_row_counts(catalog.load_table(f"db.a_{tag}")) == counts
    figures["examples"] += 1
    figures["deleted"] += len(before - after)
    figures["b_files_kept"] += len(b_files)
    figures["sharded"] += int(draw["sharded"])


DRAWS = st.fixed_dictionaries(
    {
        "ops": st.lists(st.sampled_from(["append", "overwrite", "delete"]), min_size=1, max_size=3),
        "property": st.sampled_from(PROPERTIES),
        "spellings": st.lists(st.sampled_from(SPELLINGS), min_size=1, max_size=3, unique=True),
        "alias": st.integers(0, 3),
        "sharded": st.booleans(),
    }
)


@pytest.mark.parametrize("store", list(STORES))
def test_other_tables_files_survive_every_spelling(request: pytest.FixtureRequest, store: str) -> None:
    catalog = request.getfixturevalue(STORES[store])
    figures = {"examples": 0, "deleted": 0, "b_files_kept": 0, "sharded": 0}

    @PROFILE
    @given(draw=DRAWS)
    def prop(draw: dict[str, Any]) -> None:
        check(catalog, store, draw, figures)

    prop()
    report(f"other_tables_property[{store}]", **figures, files_lost=0)
