"""Table histories drawn by the reliability properties: appends, overwrites, row deletes, snapshot expiry."""

from __future__ import annotations

from pyiceberg.table import Table

from tests.orphans.scenario import rows


def write_history(table: Table, ops: list[str]) -> None:
    """Apply each op in turn; the first commit is always an append, so every later op has rows to change."""
    next_id = 100
    live: set[int] = set()  # the ids the current snapshot holds: each delete removes one of them
    for op in ops:
        if op == "append" or table.current_snapshot() is None:
            table.append(rows(next_id, 12))
            live.update(range(next_id, next_id + 12))
            next_id += 12
        elif op == "overwrite":
            table.overwrite(rows(next_id, 5), overwrite_filter=f"id < {next_id - 6}")
            live = {i for i in live if i >= next_id - 6} | set(range(next_id, next_id + 5))
            next_id += 5
        elif op == "delete":
            if live:  # a row the table holds: a delete that matches none only warns and commits nothing
                victim = next_id - 3 if next_id - 3 in live else max(live)
                table.delete(f"id = {victim}")
                live.discard(victim)
        elif len(table.metadata.snapshots) > 1:
            current = table.current_snapshot()
            oldest = min(table.metadata.snapshots, key=lambda s: s.sequence_number)
            if current is None or oldest.snapshot_id != current.snapshot_id:
                table.maintenance.expire_snapshots().by_id(oldest.snapshot_id).commit()
