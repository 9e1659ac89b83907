"""Airflow's REST API as the end-to-end tests call it on a deployment their conftest started (tests/ui, tests/celery):
a token for the ``admin`` user, and JSON requests made with it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def api_token(base: str, password: str) -> str | None:
    """A token for ``admin`` from the api-server at ``base``, or None while it does not answer yet."""
    request = urllib.request.Request(
        f"{base}/auth/token",
        method="POST",
        data=json.dumps({"username": "admin", "password": password}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read())["access_token"])
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()  # it holds the response's socket
        return None


def api_request(base: str, token: str, method: str, path: str, body: Any, timeout: float) -> Any:
    """The JSON answer of ``method`` on ``/api/v2{path}`` (None for an empty one), ``body`` sent as JSON."""
    request = urllib.request.Request(
        f"{base}/api/v2{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")
