"""Which properties ``fs.vended`` renews, when, and what a renewal that vends nothing reports (no service:
the reload is a plain function; the renewal against a real catalog is in tests/orphans/test_vended_credentials.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from airflow_iceberg_maint.errors import StorageError
from airflow_iceberg_maint.fs.vended import S3_SESSION_TOKEN_EXPIRES_AT_MS, remember, renewing_credentials


def vended(lifetime: float) -> dict[str, Any]:
    return {
        "s3.access-key-id": f"ASIA{uuid.uuid4().hex[:16]}",
        "s3.secret-access-key": "secret",
        "s3.session-token": "token",
        S3_SESSION_TOKEN_EXPIRES_AT_MS: str(int((time.time() + lifetime) * 1000)),
    }


def test_only_session_credentials_with_an_end_that_a_load_recorded_are_renewed() -> None:
    never = vended(3600)
    assert renewing_credentials(never) is None  # no table load recorded it
    static = {k: v for k, v in vended(3600).items() if k != "s3.session-token"}
    no_end = {k: v for k, v in vended(3600).items() if k != S3_SESSION_TOKEN_EXPIRES_AT_MS}
    for props in (static, no_end, {**vended(3600), S3_SESSION_TOKEN_EXPIRES_AT_MS: "soon"}):
        remember(props, lambda: {})
        assert renewing_credentials(props) is None
    recorded = vended(3600)
    remember(recorded, lambda: {})
    credentials = renewing_credentials(recorded)
    assert credentials is not None
    frozen = credentials.get_frozen_credentials()  # an hour left: no renewal yet
    assert (frozen.access_key, frozen.token) == (recorded["s3.access-key-id"], "token")


def test_renewal_starts_a_quarter_of_a_short_lifetime_before_the_end() -> None:
    first, second = vended(1.2), vended(3600)
    loads: list[int] = []

    def reload() -> dict[str, Any]:
        loads.append(1)
        return second

    remember(first, reload)
    credentials = renewing_credentials(first)
    assert credentials is not None
    assert credentials.get_frozen_credentials().access_key == first["s3.access-key-id"] and loads == []
    # 1.2 s lifetime: renewed 0.3 s before the end, not botocore's 15 minutes (which is at once).
    assert not credentials.refresh_needed()
    while not credentials.refresh_needed():
        time.sleep(0.01)
    assert float(first[S3_SESSION_TOKEN_EXPIRES_AT_MS]) / 1000 - time.time() <= 0.3
    assert credentials.get_frozen_credentials().access_key == second["s3.access-key-id"] and loads == [1]


def test_a_load_that_vends_nothing_is_a_storage_error() -> None:
    first = vended(0.8)
    remember(first, lambda: {"s3.endpoint": "http://store"})
    credentials = renewing_credentials(first)
    assert credentials is not None
    # The last half of the window (0.1 s of 0.8): every request waits for a renewal, and its failure is raised.
    while not credentials.refresh_needed(0.1):
        time.sleep(0.01)
    with pytest.raises(StorageError, match="loading the table again vended none"):
        credentials.get_frozen_credentials()
