"""Leases taken through a store's own API, as another run (an Airflow task, a command) takes them."""

from __future__ import annotations

import uuid
from datetime import timedelta

from airflow_iceberg_maint.state.leases import Lease, LeaseStore


def hold(store: LeaseStore, table: str, owner: str, ttl: timedelta = timedelta(hours=1), process: str = "") -> Lease:
    """Take the lease of ``table`` for ``owner`` (it must be free, expired or ``owner``'s); the lease taken."""
    token = uuid.uuid4().hex
    got = store.acquire(table, owner, ttl, token, process)
    assert (got.owner, got.token) == (owner, token), f"{table}: held by {got.owner}"
    return got
