"""The ``iceberg-maint`` command (contract: shared CLI.md).

Each subcommand lives in its own module with ``register(subparsers)``; the module sets
``func`` on its parser to a callable ``(args) -> dict``. With ``--json`` that dict is
printed as one JSON object on stdout; otherwise its ``text`` rendering is.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from airflow_iceberg_maint.errors import MaintenanceError

COMMAND_MODULES = ("orphans", "due", "policy", "index")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iceberg-maint", description="Keep Apache Iceberg tables healthy.")
    parser.add_argument("--catalog", default="default", help="pyiceberg catalog name (default: default)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"airflow_iceberg_maint.cli.{name}").register(subparsers)
    return parser


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _render_text(result: dict[str, Any]) -> str:
    text = result.pop("__text__", None)
    if text is not None:
        return str(text)
    return "\n".join(f"{key}: {value}" for key, value in result.items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        result: dict[str, Any] = args.func(args)
    except (MaintenanceError, ValueError, OSError) as exc:
        print(f"iceberg-maint {args.command}: {exc}".replace("\n", " "), file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        result.pop("__text__", None)
        json.dump(result, sys.stdout, default=str)
        sys.stdout.write("\n")
    else:
        print(_render_text(result))
    return 0
