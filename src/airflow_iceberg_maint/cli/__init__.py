"""The ``iceberg-maint`` command (contract: docs/cli.md).

Each subcommand's arguments are declared in ``cli.parsers`` (``register(subparsers)``), which imports
nothing heavy; its parser's ``func`` names the function ``(args) -> dict`` that runs it, in the
subcommand's own module (``cli.orphans``, ``cli.expiry``, ...), imported only once the arguments parsed:
``--version``, ``--help`` and a usage error never load pyiceberg, pyarrow, SQLAlchemy or Airflow. With
``--json`` the dict is printed as one JSON object on stdout; otherwise its ``text`` rendering is.
Subcommands get their catalog from ``cli.catalog.cli_catalog(args)``: ``--catalog`` (pyiceberg's
configuration) or ``--conn-id`` (an Airflow connection, built as the operators build it).

Exit status:

- 0: the command completed, and every delete it made succeeded.
- 2: bad input, or the command refused or could not finish: one line on stderr naming the input
  or the failure, nothing on stdout (``orphans --json`` prints the report of a prefix mismatch first).
- 3: the command completed but some deletes failed (``orphans``, ``expire-snapshots``, ``index remove-unreferenced``):
  the output is printed in full, with ``--json`` the whole object on stdout, its ``failed`` list
  naming each file and the store's error, and one line on stderr counts them. Whatever was not
  deleted is still there, and a later run tries it again; scripts should treat 3 as a failure,
  as the Airflow operators do.
- 4: another maintenance run (an Airflow task, or another ``iceberg-maint`` run) holds the table's
  lease (``cli.lease``) and ``--lease-wait`` did not outlast it: one line on stderr names the table,
  the holder and when its lease expires; nothing was changed.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from airflow_iceberg_maint import __version__
from airflow_iceberg_maint.errors import MaintenanceError, TableBusyError

COMMAND_MODULES = ("orphans", "expiry", "compaction", "manifests", "due", "policy", "index", "health")
PROGRESS_MODES = ("auto", "on", "off")
#: The exit status of a command that completed with failed deletes (see the module's docstring).
EXIT_FAILED_DELETES = 3
#: The exit status of a command that found the table's lease held (see the module's docstring).
EXIT_TABLE_BUSY = 4
#: The key of a command's result that holds the files whose deletion failed (``{"path", "error"}`` each).
FAILED = "failed"
DEFAULT_CATALOG = "default"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iceberg-maint", description="Keep Apache Iceberg tables healthy.")
    parser.add_argument(
        "--catalog",
        help="pyiceberg catalog name, configured in .pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__<KEY> "
        f"variables (default: {DEFAULT_CATALOG})",
    )
    parser.add_argument(
        "--conn-id",
        metavar="NAME",
        help="use the Airflow 'iceberg' connection NAME (AIRFLOW_CONN_<NAME> or a secrets backend), "
        "as the DAGs do, instead of --catalog",
    )
    parser.add_argument("--version", action="version", version=f"iceberg-maint {__version__}")
    chatter = parser.add_mutually_exclusive_group()
    chatter.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    chatter.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print nothing on stderr but errors: no warnings, no progress display",
    )
    parser.add_argument(
        "--progress",
        choices=PROGRESS_MODES,
        default="auto",
        help="draw the long phases on stderr: auto (default) when stdout and stderr are terminals, "
        "without --json or --quiet; on: always (even when not a terminal); off: never",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"airflow_iceberg_maint.cli.parsers.{name}").register(subparsers)
    return parser


def _render_text(result: dict[str, Any]) -> str:
    text = result.pop("__text__", None)
    if text is not None:
        return str(text)
    return "\n".join(f"{key}: {value}" for key, value in result.items())


def _progress_display(args: argparse.Namespace) -> AbstractContextManager[object]:
    if args.progress == "auto":
        # Both streams: a script reading stdout wants no cursor movements on a terminal's stderr either.
        wanted = not getattr(args, "json", False) and not args.quiet and sys.stdout.isatty() and sys.stderr.isatty()
    else:
        wanted = args.progress == "on"
    if not wanted:
        return nullcontext()
    from airflow_iceberg_maint.cli.progress import terminal_progress  # rich is imported only to draw

    return terminal_progress(force=args.progress == "on")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.catalog is not None and args.conn_id is not None:
        print(
            f"iceberg-maint {args.command}: --catalog {args.catalog} and --conn-id {args.conn_id}: give one of them "
            "(--catalog: a pyiceberg catalog; --conn-id: an Airflow connection)",
            file=sys.stderr,
        )
        return 2
    if args.quiet:
        logging.captureWarnings(True)  # Python warnings then go through logging, which shows errors only
    failure: tuple[str, int] | None = None  # the message and status, not the error: see console()
    with _progress_display(args):
        # Inside the display, so that log lines print above its bars (it redirects stderr).
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.ERROR if args.quiet else logging.WARNING,
            stream=sys.stderr,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        try:
            result: dict[str, Any] = args.func(args)
        except (MaintenanceError, ValueError, OSError) as exc:
            failure = (str(exc), EXIT_TABLE_BUSY if isinstance(exc, TableBusyError) else 2)
    if failure is not None:
        print(f"iceberg-maint {args.command}: {failure[0]}".replace("\n", " "), file=sys.stderr)
        return failure[1]
    counts_failures = result.pop("__failed_deletes__", False)
    if getattr(args, "json", False):
        result.pop("__text__", None)
        json.dump(result, sys.stdout, default=str)
        sys.stdout.write("\n")
    else:
        print(_render_text(result))
    if counts_failures and result.get(FAILED):
        sys.stdout.flush()  # the whole output before the line that explains the status
        print(
            f"iceberg-maint {args.command}: {len(result[FAILED])} deletes failed (listed in the output)",
            file=sys.stderr,
        )
        return EXIT_FAILED_DELETES
    return 0


def console() -> None:
    """The ``iceberg-maint`` script: ``main``, then a garbage collection while pyarrow is still whole.

    A stopped run (a lost lease, a failed read) can leave pyarrow readers in reference cycles with
    the frames that held them; collected only as the interpreter tears pyarrow down, a reader's
    native threads abort the process ("terminate called without an active exception", status -6)
    after the run has reported correctly.
    """
    status = main()
    gc.collect()
    sys.exit(status)


def with_failed_deletes(result: dict[str, Any]) -> dict[str, Any]:
    """Mark a command's result whose ``failed`` list, when not empty, makes the exit status 3."""
    return {**result, "__failed_deletes__": True}
