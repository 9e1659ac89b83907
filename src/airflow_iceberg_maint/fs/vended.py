"""S3 credentials a REST catalog vends with a table, renewed before they expire by loading the table again.

A catalog that vends credentials puts them in the table's FileIO properties (``s3.access-key-id``,
``s3.secret-access-key``, ``s3.session-token``) with their end (``s3.session-token-expires-at-ms``).
Neither pyiceberg nor the S3 clients built from those properties renew them, so a run longer than their
lifetime would meet the store's refusals once they end. Not every catalog has a credentials endpoint
(SeaweedFS has none), while every one vends again with each table load: ``catalog.load_table`` records,
for the access key it was given, how to load the table again (``remember``); an S3 client built from
properties holding that key gets credentials that load the table again shortly before they end
(``renewing_credentials``).

Only the boto3 clients of ``s3_client`` renew: a pyarrow filesystem (the table's FileIO, and listing
through it with ``iceberg-maint.s3-client=file-io``) keeps the credentials it was built with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyiceberg.io import (
    AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY,
    AWS_SESSION_TOKEN,
    S3_ACCESS_KEY_ID,
    S3_SECRET_ACCESS_KEY,
    S3_SESSION_TOKEN,
)
from pyiceberg.utils.properties import get_first_property_value

from airflow_iceberg_maint.errors import StorageError

if TYPE_CHECKING:
    from botocore.credentials import RefreshableCredentials

#: The REST catalog's property for the end of vended S3 credentials, in milliseconds since the epoch.
S3_SESSION_TOKEN_EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
#: Renewal starts this long before the end (botocore's "advisory" window), or at a quarter of a short
#: lifetime: renewing 15 minutes ahead, botocore's default, would reload the table on every request when
#: the catalog vends for 15 minutes.
RENEW_BEFORE_SECONDS = 300.0
#: Entries whose credentials ended this long ago are dropped: nothing built from them can be renewed later.
FORGET_AFTER_SECONDS = 3600.0

Reload = Callable[[], Mapping[str, Any]]


@dataclass(frozen=True)
class _Vended:
    reload: Reload
    expires_at: float  # seconds since the epoch
    lifetime: float  # seconds the credentials had left when the table was loaded


_lock = threading.Lock()
_by_access_key: dict[str, _Vended] = {}


def _keys(props: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    p = dict(props)
    return (
        get_first_property_value(p, S3_ACCESS_KEY_ID, AWS_ACCESS_KEY_ID),
        get_first_property_value(p, S3_SECRET_ACCESS_KEY, AWS_SECRET_ACCESS_KEY),
        get_first_property_value(p, S3_SESSION_TOKEN, AWS_SESSION_TOKEN),
    )


def _expires_at(props: Mapping[str, Any]) -> float | None:
    value = props.get(S3_SESSION_TOKEN_EXPIRES_AT_MS)
    try:
        return int(value) / 1000 if value not in (None, "") else None
    except (TypeError, ValueError):
        return None  # not a time: the credentials are used as static ones, as pyiceberg does


def remember(props: Mapping[str, Any], reload: Reload) -> None:
    """Record that the credentials in a loaded table's ``props`` are renewed by ``reload`` (the table's
    FileIO properties from a new load). Properties without session credentials and their end are ignored."""
    access_key, _, token = _keys(props)
    expires_at = _expires_at(props)
    if not access_key or not token or expires_at is None:
        return
    now = time.time()
    with _lock:
        for key in [k for k, v in _by_access_key.items() if v.expires_at < now - FORGET_AFTER_SECONDS]:
            del _by_access_key[key]
        _by_access_key[access_key] = _Vended(reload, expires_at, max(expires_at - now, 0.0))


def renewing_credentials(props: Mapping[str, Any]) -> RefreshableCredentials | None:
    """Credentials that start as the vended ones in ``props`` and are renewed by loading the table again,
    or None when ``props`` hold no credentials a table load recorded."""
    access_key, secret_key, token = _keys(props)
    with _lock:
        vended = _by_access_key.get(access_key or "")
    if vended is None or not secret_key or not token:
        return None

    def renew() -> dict[str, str]:
        fresh = vended.reload()
        key, secret, session = _keys(fresh)
        ends = _expires_at(fresh)
        if not key or not secret or not session or ends is None:
            raise StorageError(
                "the vended S3 credentials ran out and loading the table again vended none: "
                f"the catalog no longer vends credentials with an end ({S3_SESSION_TOKEN_EXPIRES_AT_MS})"
            )
        return {"access_key": key, "secret_key": secret, "token": session, "expiry_time": _iso(ends)}

    # Imported here: every table load goes through ``remember``, and a table off S3 needs no botocore.
    from botocore.credentials import RefreshableCredentials

    renew_before = min(RENEW_BEFORE_SECONDS, vended.lifetime / 4)
    return RefreshableCredentials.create_from_metadata(
        {"access_key": access_key, "secret_key": secret_key, "token": token, "expiry_time": _iso(vended.expires_at)},
        refresh_using=renew,
        method="iceberg-vended",
        advisory_timeout=renew_before,
        # Every request waits for new credentials in the last half of that window.
        mandatory_timeout=renew_before / 2,
    )


def _iso(epoch_seconds: float) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).isoformat()
