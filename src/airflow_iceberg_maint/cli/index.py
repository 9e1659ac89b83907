"""``iceberg-maint index``: create, list, refresh, lag, lookup and expire secondary indexes (docs/cli.md).

Their arguments are ``airflow_iceberg_maint.cli.parsers.index``'s.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any
from uuid import UUID

from pyiceberg.types import NestedField

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.cli import with_failed_deletes
from airflow_iceberg_maint.cli.catalog import cli_catalog
from airflow_iceberg_maint.cli.lease import table_lease
from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.lifecycle.expire import expire_extracts
from airflow_iceberg_maint.index.lifecycle.lag import index_lag
from airflow_iceberg_maint.index.lifecycle.references import remove_unreferenced_index_files
from airflow_iceberg_maint.index.metadata.builders import new_index_metadata
from airflow_iceberg_maint.index.metadata.expressions import split_expression_list
from airflow_iceberg_maint.index.metadata.model import IndexMetadata
from airflow_iceberg_maint.index.metadata.placement import use_index_location
from airflow_iceberg_maint.index.metadata.store import IndexStore
from airflow_iceberg_maint.index.read.keys import key_columns, parse_lookup_value
from airflow_iceberg_maint.index.read.lookup import lookup
from airflow_iceberg_maint.index.read.query import query_keys, query_range
from airflow_iceberg_maint.index.write.incremental import refresh_index
from airflow_iceberg_maint.reachability.cutoff import cutoff_for_days


def _table(args: argparse.Namespace) -> Any:
    return load_table(cli_catalog(args), args.table)


def ordering_texts(metadata: IndexMetadata) -> list[str]:
    """The ordering expressions in the CLI form they were given in."""
    schema = metadata.current_schema()
    return [o.expression.to_text(schema) for o in metadata.ordering_fields(schema)]


def run_create(args: argparse.Namespace) -> dict[str, Any]:
    with table_lease(args, args.table):
        return _create(args)


def _create(args: argparse.Namespace) -> dict[str, Any]:
    table = _table(args)

    def definition() -> IndexMetadata:
        ordering, properties = split_expression_list(args.ordering), dict(args.property)
        return new_index_metadata(table, args.index, ordering, args.identity, args.with_row_location, properties)

    metadata = definition()  # bad input is refused before the location is recorded
    if args.location is not None:
        table = use_index_location(table, args.location)
        metadata = definition()
    location = IndexStore(table).create(metadata, args.index)
    return {
        "index": args.index,
        "metadata_location": location,
        "index_uuid": metadata.index_uuid,
        "ordering": ordering_texts(metadata),
        "location": metadata.location,
    }


def run_list(args: argparse.Namespace) -> dict[str, Any]:
    table = _table(args)
    store = IndexStore(table)
    indexes: list[dict[str, Any]] = []
    for name in store.names():
        metadata, location, _ = store.load(name)
        newest = metadata.newest_extract()
        indexes.append(
            {
                "name": name,
                "metadata_location": location,
                "index_uuid": metadata.index_uuid,
                "ordering": ordering_texts(metadata),
                "extracts": len(metadata.extracts),
                "newest_extract_snapshot_id": newest.source_table_snapshot_id if newest else None,
            }
        )
    text = "\n".join(f"{i['name']}: ordering {', '.join(i['ordering'])}; {i['extracts']} extract(s)" for i in indexes)
    return {"table": args.table, "indexes": indexes, "__text__": text or "no indexes"}


def run_refresh(args: argparse.Namespace) -> dict[str, Any]:
    with table_lease(args, args.table):
        return refresh_index(_table(args), args.index, args.snapshot_id, full=args.full).to_json()


def run_lag(args: argparse.Namespace) -> dict[str, Any]:
    table = _table(args)
    metadata, _, _ = IndexStore(table).load(args.index)
    return index_lag(table, args.index, metadata).to_json()


def run_lookup(args: argparse.Namespace) -> dict[str, Any]:
    form = _lookup_form(args)  # checked before the catalog is contacted
    table = _table(args)
    store = IndexStore(table)
    keys = key_columns(store.load(args.index)[0])
    extra: dict[str, Any] = {}
    if form == "--in-file":
        probes = read_key_file(args.in_file, keys)
        extra["keys"] = len(probes)
        found = query_keys(table, args.index, probes, args.snapshot_id, args.columns, store)
    elif form == "--from/--to":
        low, high = (None if v is None else parse_lookup_value(v, keys[0], o) for v, o in _bounds(args))
        found = query_range(table, args.index, low, high, args.snapshot_id, args.columns, store)
    else:
        found = lookup(table, args.index, _eq_probes(args, keys), args.snapshot_id, args.columns, store)
    result = {**found.to_json(), **extra}
    result["rows"] = [{k: _json_value(v) for k, v in row.items()} for row in result["rows"]]
    result["__text__"] = "\n".join(json.dumps(row) for row in result["rows"]) or "no rows"
    return result


def _lookup_form(args: argparse.Namespace) -> str:
    """Which of the lookup forms the options give: exactly one, or an error naming them."""
    given = [
        name
        for name, present in (
            ("--eq", bool(args.eq)),
            ("--is-null", args.is_null),
            ("--in-file", args.in_file is not None),
            ("--from/--to", args.low is not None or args.high is not None),
        )
        if present
    ]
    if not given:
        raise InvalidInputError("index lookup: give --eq, --is-null, --in-file, or --from and/or --to")
    if len(given) > 1:
        raise InvalidInputError(f"index lookup: {' and '.join(given)} cannot be combined; give one of them")
    return given[0]


def _bounds(args: argparse.Namespace) -> list[tuple[str | None, str]]:
    return [(args.low, "--from"), (args.high, "--to")]


def _eq_probes(args: argparse.Namespace, keys: list[NestedField]) -> list[tuple[Any, ...]]:
    if args.is_null:
        return [tuple(None for _ in keys)]
    if len(keys) == 1:
        return [(parse_lookup_value(v, keys[0]),) for v in args.eq]
    if len(args.eq) == len(keys):
        return [tuple(parse_lookup_value(v, k) for v, k in zip(args.eq, keys, strict=True))]
    names = ", ".join(k.name for k in keys)
    raise InvalidInputError(f"--eq: index {args.index!r} has key columns ({names}): give one --eq per column")


def read_key_file(path: str, keys: list[NestedField]) -> list[tuple[Any, ...]]:
    """The distinct keys of an ``--in-file`` file: one a line, tab-separated values; blank lines skipped."""
    try:
        with open(path, encoding="utf-8") as stream:
            lines = stream.read().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"--in-file {path}: cannot be read ({exc})") from exc
    probes: dict[tuple[Any, ...], None] = {}
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        values = line.split("\t")
        if len(values) != len(keys):
            names = ", ".join(k.name for k in keys)
            raise InvalidInputError(
                f"--in-file {path} line {number}: {len(values)} value(s), the index needs {len(keys)} ({names}), "
                "separated by tabs"
            )
        where = f"--in-file {path} line {number}:"
        probes[tuple(parse_lookup_value(v, k, where) for v, k in zip(values, keys, strict=True))] = None
    if not probes:
        raise InvalidInputError(f"--in-file {path}: no keys (the file is empty or only blank lines)")
    return list(probes)


def _json_value(value: Any) -> Any:
    """Row values as JSON: ISO 8601 for dates and times, text for decimals and UUIDs, hex for bytes."""
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value


def run_expire(args: argparse.Namespace) -> dict[str, Any]:
    with table_lease(args, args.table):
        return expire_extracts(_table(args), args.index, retain_last=args.retain_last, older_than=args.older_than)


def run_remove_unreferenced(args: argparse.Namespace) -> dict[str, Any]:
    now = datetime.now(UTC)
    cutoff = cutoff_for_days(args.older_than_days, now, "--older-than-days")  # refused before any catalog call
    with table_lease(args, args.table):
        table = _table(args)
        report = remove_unreferenced_index_files(table, cutoff, name=args.index, dry_run=args.dry_run, now=now)
    result = report.to_json()
    verb = "would delete" if args.dry_run else "deleted"
    count = len(report.unreferenced_files) if args.dry_run else report.deleted_file_count
    lines = [f"{verb} {count} unreferenced index file(s) of {', '.join(report.indexes) or 'no index'}"]
    lines += [f"  failed: {f['path']}: {f['error']}" for f in report.failed]
    result["__text__"] = "\n".join(lines)
    return with_failed_deletes(result)
