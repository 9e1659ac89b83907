"""``iceberg-maint index``: create, list, refresh, lag, lookup and expire secondary indexes (docs/cli.md)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any
from uuid import UUID

from pyiceberg.types import NestedField

from airflow_iceberg_maint.catalog import load_table
from airflow_iceberg_maint.cli import add_json_flag, cli_catalog, timestamp, with_failed_deletes
from airflow_iceberg_maint.cli.lease import add_lease_wait, table_lease
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
from airflow_iceberg_maint.reachability.cutoff import DEFAULT_OLDER_THAN_DAYS, cutoff_for_days


def _property(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected k=v, got {text!r}")
    return key.strip(), value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _columns(text: str) -> list[str]:
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise argparse.ArgumentTypeError(f"expected column names separated by commas, got {text!r}")
    return columns


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("index", help="secondary indexes: create, list, refresh, lag, lookup, expire")
    commands = parser.add_subparsers(dest="index_command", required=True)

    create = commands.add_parser("create", help="define a new index (no extract yet)")
    _table_and_index(create)
    create.add_argument("--ordering", required=True, help='ordering key, e.g. "bucket(16, id), id"')
    create.add_argument("--identity", action="append", default=[], metavar="COLUMN", help="extra identity column")
    create.add_argument("--with-row-location", action="store_true", help="store _file and _pos to fetch rows")
    create.add_argument("--property", action="append", default=[], type=_property, metavar="k=v")
    create.add_argument(
        "--location",
        metavar="URI",
        help="folder of the table's indexes, each at URI/NAME (default TABLE-LOCATION/index), kept as the table "
        "property write.index.path: for stores that refuse TABLE-LOCATION/index/ (S3 Tables, table buckets)",
    )
    add_lease_wait(create)
    create.set_defaults(func=run_create)

    listing = commands.add_parser("list", help="the indexes of a table")
    listing.add_argument("table", help="namespace.table")
    add_json_flag(listing)
    listing.set_defaults(func=run_list)

    refresh = commands.add_parser("refresh", help="build and commit an extract")
    _table_and_index(refresh)
    refresh.add_argument("--snapshot-id", type=int, help="table snapshot to index (default: current)")
    refresh.add_argument(
        "--full",
        action="store_true",
        help="rebuild every region (default: incremental from the nearest usable extract)",
    )
    add_lease_wait(refresh)
    refresh.set_defaults(func=run_refresh)

    lag = commands.add_parser("lag", help="how far the index lags the table")
    _table_and_index(lag)
    lag.set_defaults(func=run_lag)

    find = commands.add_parser("lookup", help="rows whose key equals a value, through the index")
    _table_and_index(find)
    find.add_argument("--eq", action="append", metavar="VALUE", help="key value (repeat for several keys)")
    find.add_argument("--is-null", action="store_true", help="look up the null key")
    find.add_argument("--in-file", metavar="FILE", help="many keys: one a line (tab-separated for several columns)")
    find.add_argument("--from", dest="low", metavar="VALUE", help="range: first key column >= VALUE")
    find.add_argument("--to", dest="high", metavar="VALUE", help="range: first key column <= VALUE")
    find.add_argument("--snapshot-id", type=int, help="table snapshot to read (default: current)")
    find.add_argument("--columns", type=_columns, help="c1,c2: columns to return (default: all)")
    find.set_defaults(func=run_lookup)

    expire = commands.add_parser("expire", help="drop old extracts and their unreferenced files")
    _table_and_index(expire)
    expire.add_argument("--retain-last", type=_non_negative, help="keep this many newest extracts")
    expire.add_argument("--older-than", type=timestamp, help="drop extracts created before this ISO 8601 time")
    add_lease_wait(expire)
    expire.set_defaults(func=run_expire)

    unreferenced = commands.add_parser(
        "remove-unreferenced",
        help="delete old index files nothing references (failed builds, dropped metadata versions)",
    )
    unreferenced.add_argument("table", help="namespace.table")
    unreferenced.add_argument("index", nargs="?", help="index name (default: every index of the table)")
    unreferenced.add_argument(
        "--older-than-days",
        type=float,
        default=DEFAULT_OLDER_THAN_DAYS,
        help=f"only files older than this many days (default {DEFAULT_OLDER_THAN_DAYS:g})",
    )
    unreferenced.add_argument("--dry-run", action="store_true", help="report, delete nothing")
    add_lease_wait(unreferenced)
    add_json_flag(unreferenced)
    unreferenced.set_defaults(func=run_remove_unreferenced)


def _table_and_index(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="namespace.table")
    parser.add_argument("index", help="index name")
    add_json_flag(parser)


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
