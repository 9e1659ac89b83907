"""``iceberg-maint index``'s arguments; ``airflow_iceberg_maint.cli.index`` runs each of its commands."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_iceberg_maint.cli.parsers import Command
from airflow_iceberg_maint.cli.parsers.values import add_json_flag, add_lease_wait, timestamp
from airflow_iceberg_maint.reachability.cutoff import DEFAULT_OLDER_THAN_DAYS


def _run(name: str) -> Command:
    return Command("airflow_iceberg_maint.cli.index", name)


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
    create.set_defaults(func=_run("run_create"))

    listing = commands.add_parser("list", help="the indexes of a table")
    listing.add_argument("table", help="namespace.table")
    add_json_flag(listing)
    listing.set_defaults(func=_run("run_list"))

    refresh = commands.add_parser("refresh", help="build and commit an extract")
    _table_and_index(refresh)
    refresh.add_argument("--snapshot-id", type=int, help="table snapshot to index (default: current)")
    refresh.add_argument(
        "--full",
        action="store_true",
        help="rebuild every region (default: incremental from the nearest usable extract)",
    )
    add_lease_wait(refresh)
    refresh.set_defaults(func=_run("run_refresh"))

    lag = commands.add_parser("lag", help="how far the index lags the table")
    _table_and_index(lag)
    lag.set_defaults(func=_run("run_lag"))

    find = commands.add_parser("lookup", help="rows whose key equals a value, through the index")
    _table_and_index(find)
    find.add_argument("--eq", action="append", metavar="VALUE", help="key value (repeat for several keys)")
    find.add_argument("--is-null", action="store_true", help="look up the null key")
    find.add_argument("--in-file", metavar="FILE", help="many keys: one a line (tab-separated for several columns)")
    find.add_argument("--from", dest="low", metavar="VALUE", help="range: first key column >= VALUE")
    find.add_argument("--to", dest="high", metavar="VALUE", help="range: first key column <= VALUE")
    find.add_argument("--snapshot-id", type=int, help="table snapshot to read (default: current)")
    find.add_argument("--columns", type=_columns, help="c1,c2: columns to return (default: all)")
    find.set_defaults(func=_run("run_lookup"))

    expire = commands.add_parser("expire", help="drop old extracts and their unreferenced files")
    _table_and_index(expire)
    expire.add_argument("--retain-last", type=_non_negative, help="keep this many newest extracts")
    expire.add_argument("--older-than", type=timestamp, help="drop extracts created before this ISO 8601 time")
    add_lease_wait(expire)
    expire.set_defaults(func=_run("run_expire"))

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
    unreferenced.set_defaults(func=_run("run_remove_unreferenced"))


def _table_and_index(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("table", help="namespace.table")
    parser.add_argument("index", help="index name")
    add_json_flag(parser)
