"""The argument types and options several subcommands share (parsed before any heavy module loads)."""

from __future__ import annotations

import argparse
import math
from datetime import UTC, datetime


def timestamp(text: str) -> datetime:
    """An ISO 8601 argument; one without a time zone is UTC."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 timestamp, got {text!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _positive(text: str) -> int:
    # The name shows in argparse's message for a non-number ("invalid _positive value"): kept as it was.
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def add_lease_wait(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lease-wait",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="when another run holds the table's lease, wait up to this long for it (default 0: fail at once, "
        "exit status 4)",
    )


def add_cache_options(parser: argparse.ArgumentParser) -> None:
    """``--cache-location URI`` and ``--no-cache``: the digest cache of manifest lists and manifests (S22)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--cache-location",
        metavar="URI",
        help="keep digests of manifest lists and manifests here, a local folder or file:// URI "
        "(default: digests beside the state store's SQLite file, else ~/.local/state/iceberg-maint/digests)",
    )
    group.add_argument("--no-cache", action="store_true", help="read every manifest list and manifest")


def cache_option(args: argparse.Namespace) -> str | None:
    """The ``cache`` keyword for the Python API: None with --no-cache (the API refuses a bad location in one line)."""
    # Imported here: stdlib only, but the subcommands without a cache need none of the reachability package.
    from airflow_iceberg_maint.reachability.digests import DEFAULT

    if args.no_cache:
        return None
    return str(args.cache_location) if args.cache_location else DEFAULT
