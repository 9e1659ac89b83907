"""The table lease of a command that changes a table (docs/cli.md, "Table lease"; docs/safety.md, S15).

A real run of ``orphans``, ``expire-snapshots``, ``index create|refresh|expire`` and a real run of
``index remove-unreferenced`` takes the table's lease in the state store's database before it loads
the table, as the Airflow tasks do, so that it never overlaps an Airflow task on the same database
nor another ``iceberg-maint`` run. A dry run changes nothing and takes no lease: it can run beside a
long maintenance run without holding it up.

Without ``$ICEBERG_MAINT_STATE_URL`` the lease lives in this host's default state file, which an
Airflow task without a ``state_url`` on the same host takes too (``airflow.table_lease``): out of
the box the two exclude each other on one host. Across hosts they share a lease only through a
state store both name (``$ICEBERG_MAINT_STATE_URL`` and the tasks' ``state_url``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from airflow_iceberg_maint.catalog import parse_identifier
from airflow_iceberg_maint.errors import TableBusyError
from airflow_iceberg_maint.state.cleanup import default_state_url
from airflow_iceberg_maint.state.lease_fence import held
from airflow_iceberg_maint.state.leases import DEFAULT_TTL_SECONDS, take
from airflow_iceberg_maint.state.sql_leases import SqlLeases

_LOG = logging.getLogger(__name__)


def run_owner(args: argparse.Namespace) -> str:
    """This run, as the lease's holder: the command, the host and the process (and a token of its own)."""
    command = " ".join(c for c in (args.command, getattr(args, "index_command", None)) if c)
    return f"iceberg-maint {command} on {socket.gethostname()} (pid {os.getpid()}, run {uuid.uuid4().hex[:8]})"


@contextmanager
def table_lease(args: argparse.Namespace, table: str) -> Iterator[None]:
    """Hold the lease of ``table`` for the body (a dry run: none); a held lease is ``TableBusyError``."""
    parse_identifier(table)  # a malformed name is refused before any lease is taken
    if getattr(args, "dry_run", False):
        yield
        return
    store = SqlLeases(default_state_url())
    ttl = timedelta(seconds=DEFAULT_TTL_SECONDS)
    try:
        lease = take(store, table, run_owner(args), ttl, args.lease_wait, _LOG)
    except TableBusyError as exc:
        hint = "" if args.lease_wait else " (--lease-wait SECONDS waits for it)"
        raise TableBusyError(f"{exc}; nothing was changed{hint}") from exc
    _LOG.info("table %s: lease taken by %s, until %s unless renewed", table, lease.owner, lease.expires_at)
    with held(store, lease, ttl, _LOG):
        yield
