"""A streaming writer: one small append a second until told to stop, for the compaction-under-load test.

It runs in its own process (forked from ``worker.context()``) and logs one JSON line per committed
append: the ids it added and the commits refused first (``CommitFailedException``: another commit, the
compaction's, landed meanwhile; the append is planned again on the new metadata). The cadence is the
writer's own timer; the test waits on the log, never on time.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

from tests.orphans.scenario import rows

BATCH = 12  # rows an append: two of each category, so every partition gets a new small file
ATTEMPTS = 20


def appended(log_path: str) -> list[dict[str, Any]]:
    """The appends the writer logged so far."""
    if not os.path.exists(log_path):
        return []
    with open(log_path) as fh:
        return [json.loads(line) for line in fh if line.endswith("\n")]


def run(uri: str, warehouse: str, name: str, first_id: int, period: float, log_path: str, stop_path: str) -> None:
    """Append ``BATCH`` new rows every ``period`` seconds until ``stop_path`` exists; ``log_path + '.done'``
    holds ``{"ok": ...}`` (the traceback on failure) at the end."""
    try:
        catalog = SqlCatalog("default", uri=uri, warehouse=warehouse)
        next_id, due = first_id, time.monotonic()
        while not os.path.exists(stop_path):
            refused = 0
            for _ in range(ATTEMPTS):
                try:
                    catalog.load_table(name).append(rows(next_id, BATCH))
                    break
                except CommitFailedException:
                    refused += 1
            else:
                raise RuntimeError(f"append refused {ATTEMPTS} times in a row")
            with open(log_path, "a") as fh:
                fh.write(json.dumps({"ids": list(range(next_id, next_id + BATCH)), "refused": refused}) + "\n")
            next_id += BATCH
            due += period
            time.sleep(max(0.0, due - time.monotonic()))  # the writer's cadence, not a wait for a condition
        result: dict[str, Any] = {"ok": True}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    with open(f"{log_path}.done", "w") as fh:
        json.dump(result, fh)
