"""Index definitions kept as code next to the DAGs (e.g. ``dags/iceberg_indexes.yaml``), and table assets.

The file is a list of tables, each with the indexes the maintenance DAGs create and keep::

    - table: demo.events
      index_location: s3://bucket/indexes/events  # optional: the folder of the table's indexes
      indexes:
        - name: events_by_id
          ordering: id                 # "EXPR, EXPR" or a list, as ``index create --ordering``
          identity: [kind]             # optional extra identity columns
          with_row_location: true      # optional, default false
          properties: {}               # optional index properties
          lag: {max_snapshots_behind: 0, max_lag_seconds: null, max_added_files: null}
          retain_last: 3               # extracts kept when expiring (default 3)
          shards: 4                    # optional: rebuild fully over 4 mapped tasks (default 1)

``index_location`` is ``index create --location``: for stores that refuse ``<table>/index/`` (S3
Tables, SeaweedFS's table buckets); recorded once as the table property ``write.index.path``.

Reading the file is cheap (no catalog call), so DAG files may read it at parse time to
declare one asset per table (``airflow.table_assets`` makes the assets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from airflow_iceberg_maint.catalog import parse_identifier
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.rules import check_index_name
from airflow_iceberg_maint.policy.lag_threshold import LagThreshold
from airflow_iceberg_maint.policy.values import optional_str

DEFAULT_RETAIN_LAST = 3
_TABLE_KEYS = frozenset({"table", "indexes", "index_location"})
_INDEX_KEYS = frozenset(
    {"name", "ordering", "identity", "with_row_location", "properties", "lag", "retain_last", "shards"}
)
_LAG_KEYS = frozenset({"max_snapshots_behind", "max_lag_seconds", "max_added_files"})


@dataclass(frozen=True)
class IndexDefinition:
    table: str
    name: str
    ordering: tuple[str, ...]
    identity: tuple[str, ...] = ()
    with_row_location: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    threshold: LagThreshold = field(default_factory=LagThreshold)
    retain_last: int = DEFAULT_RETAIN_LAST
    #: More than 1: a lagging index is rebuilt by a sharded build over this many key ranges.
    shards: int = 1


@dataclass(frozen=True)
class TableDefinition:
    table: str
    indexes: tuple[IndexDefinition, ...]
    index_location: str | None = None  # None: the default folder, or the one the table records


def _mapping(value: Any, where: str, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where}: expected a mapping, got {value!r}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidInputError(f"{where}: unknown key(s) {', '.join(map(str, unknown))} (allowed: {sorted(allowed)})")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(split_expression_list(value))
    if isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value):
        return tuple(v.strip() for v in value)
    raise InvalidInputError(f"{where}: expected a string or a list of strings, got {value!r}")


def _index(table: str, body: Any, where: str) -> IndexDefinition:
    body = _mapping(body, where, _INDEX_KEYS)
    name = body.get("name")
    if not isinstance(name, str):
        raise InvalidInputError(f"{where}: 'name' is required (a string)")
    where = f"{where} ({name})"
    try:
        check_index_name(name)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from exc
    ordering = _strings(body.get("ordering"), f"{where} ordering")
    if not ordering:
        raise InvalidInputError(f"{where}: 'ordering' is required")
    with_row_location = body.get("with_row_location", False)
    if not isinstance(with_row_location, bool):
        raise InvalidInputError(f"{where} with_row_location: expected true or false, got {with_row_location!r}")
    properties = body.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise InvalidInputError(f"{where} properties: expected a mapping, got {properties!r}")
    lag = _mapping(body.get("lag") or {}, f"{where} lag", _LAG_KEYS)
    retain_last = body.get("retain_last", DEFAULT_RETAIN_LAST)
    if isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1:
        raise InvalidInputError(f"{where} retain_last: expected a whole number >= 1, got {retain_last!r}")
    shards = body.get("shards", 1)
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidInputError(f"{where} shards: expected a whole number >= 1, got {shards!r}")
    try:
        threshold = LagThreshold.from_arguments(
            lag.get("max_snapshots_behind"), lag.get("max_lag_seconds"), lag.get("max_added_files")
        )
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where} lag: {exc}") from exc
    return IndexDefinition(
        table=table,
        name=name,
        ordering=ordering,
        identity=_strings(body.get("identity"), f"{where} identity"),
        with_row_location=with_row_location,
        properties={str(k): str(v) for k, v in properties.items()},
        threshold=threshold,
        retain_last=retain_last,
        shards=shards,
    )


def parse_index_definitions(document: Any, source: str) -> list[TableDefinition]:
    if not isinstance(document, list):
        raise InvalidInputError(f"{source}: expected a list of tables, got {type(document).__name__}")
    tables: list[TableDefinition] = []
    seen: set[str] = set()
    for position, entry in enumerate(document):
        where = f"{source} entry {position}"
        entry = _mapping(entry, where, _TABLE_KEYS)
        table = entry.get("table")
        if not isinstance(table, str):
            raise InvalidInputError(f"{where}: 'table' is required (namespace.table)")
        parse_identifier(table)
        if table in seen:
            raise InvalidInputError(f"{where}: table {table} is listed twice")
        seen.add(table)
        bodies = entry.get("indexes")
        if not isinstance(bodies, list) or not bodies:
            raise InvalidInputError(f"{where} ({table}): 'indexes' must be a non-empty list")
        indexes = tuple(_index(table, body, f"{where} ({table}) index {i}") for i, body in enumerate(bodies))
        names = [i.name for i in indexes]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"{where} ({table}): an index name is listed twice")
        location = entry.get("index_location")
        if location is not None and not isinstance(location, str):
            raise InvalidInputError(f"{where} ({table}): 'index_location' must be a location, got {location!r}")
        tables.append(TableDefinition(table, indexes, location))
    return tables


def load_index_definitions(path: str | Path) -> list[TableDefinition]:
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"index definitions {str(path)!r}: cannot be read ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        detail = str(exc).replace("\n", " ")
        raise InvalidInputError(f"index definitions {str(path)!r}: not valid YAML: {detail}") from exc
    return parse_index_definitions(document, f"index definitions {str(path)!r}")


def select_tables(definitions: Iterable[TableDefinition], tables: Iterable[str] | None) -> list[TableDefinition]:
    """The definitions of ``tables`` (None: all), in file order; tables without a definition are ignored."""
    if tables is None:
        return list(definitions)
    wanted = set(tables)
    return [d for d in definitions if d.table in wanted]


def table_names(value: Any) -> list[str] | None:
    """A ``tables`` argument as a list: a list, a comma-separated string (a rendered template), or None."""
    if value is None or isinstance(value, list | tuple):
        return None if value is None else [str(t).strip() for t in value]
    text = optional_str(value, "tables")
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]
