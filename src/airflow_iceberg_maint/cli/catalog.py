"""The catalog the global options name: ``--catalog`` (pyiceberg's configuration) or ``--conn-id`` (Airflow's).

Imported by the subcommands' modules only, once the arguments parsed: it loads pyiceberg.
"""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from airflow_iceberg_maint.catalog import open_catalog
from airflow_iceberg_maint.cli import DEFAULT_CATALOG
from airflow_iceberg_maint.errors import InvalidInputError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

_SECRETS_MASKER_LOGGER = "airflow.sdk._shared.secrets_masker"


def cli_catalog(args: argparse.Namespace) -> Catalog:
    """The catalog the global options name: ``--conn-id`` (an Airflow connection) or ``--catalog``."""
    if args.conn_id is not None:
        return _connection_catalog(args.conn_id, verbose=args.verbose)
    return open_catalog(args.catalog or DEFAULT_CATALOG)


def _connection_catalog(conn_id: str, verbose: bool) -> Catalog:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    # Airflow is imported only here, so every other use of the command stays free of it.
    try:
        from airflow_iceberg_maint.airflow.catalog import catalog_for
    except ImportError as exc:
        raise InvalidInputError(f"--conn-id {conn_id}: needs Apache Airflow, which cannot be imported: {exc}") from exc
    finally:
        # Importing Airflow points the root logger at stdout, which belongs to the --json object.
        root.handlers[:] = handlers
        root.setLevel(level)
    if not verbose:
        # Airflow masks every value of the connection extra and warns about the short ones ("sql"):
        # nothing for a command-line user to act on.
        logging.getLogger(_SECRETS_MASKER_LOGGER).setLevel(logging.ERROR)
    return catalog_for(conn_id)
