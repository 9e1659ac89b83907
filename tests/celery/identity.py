"""The Celery deployment's ``[core] hostname_callable``: each component's name, from ``ICEBERG_TEST_HOSTNAME``.

All the components run on this one machine, so the real host name cannot tell the two workers apart; each
is started with its own name (``worker-a``, ``worker-b``), which Airflow records as the task instances'
``hostname``, as two real hosts would.
"""

from __future__ import annotations

import os
import socket


def hostname() -> str:
    return os.environ.get("ICEBERG_TEST_HOSTNAME") or socket.getfqdn()
