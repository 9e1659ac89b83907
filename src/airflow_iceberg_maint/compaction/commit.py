"""A batch of rewritten groups committed as one ``replace`` snapshot, validated from the starting snapshot.

Each attempt reloads the table and checks every group against the snapshot the rewrite read
(``start``): a group fails when one of its input files is no longer live (another commit removed or
rewrote it), or when a position delete or deletion vector against one of them was added since
(its rows were read before that delete, so they would come back). Equality deletes committed since
are no conflict: the new files take the starting snapshot's data sequence number, so those deletes
apply to them as they applied to the inputs. A failed group's files are removed (nothing references
them); the other groups commit. The snapshot removes the input files and the position delete files
and deletion vectors that name only input files of the batch.

The commit goes through ``commit_fence`` (S18): a commit that lands between the reload and ours
refuses ours, and the batch is validated and built again on the new metadata (an append never
conflicts), up to ``COMMIT_ATTEMPTS`` times. A commit whose outcome cannot be established keeps
every file written and raises ``CommitOutcomeUnknownError`` (S9): the next orphan run removes
the files of a commit that did not land.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.commit_fence import commit_fenced
from airflow_iceberg_maint.compaction.live_files import applying_deletes, referenced_data_files
from airflow_iceberg_maint.compaction.options import COMMIT_ATTEMPTS
from airflow_iceberg_maint.compaction.rewriter import GroupOutput, delete_quietly
from airflow_iceberg_maint.compaction.snapshot import ReplaceSnapshot, replace_snapshot
from airflow_iceberg_maint.errors import CommitOutcomeUnknownError, first_line
from airflow_iceberg_maint.index.source.snapshot_files import SnapshotFiles, plan_snapshot


@dataclass
class BatchResult:
    snapshot_id: int | None = None
    committed: list[GroupOutput] = field(default_factory=list)
    removed_delete_files: int = 0
    #: (group id, reason) of each group left out.
    failed: list[tuple[str, str]] = field(default_factory=list)


def conflict(table: Table, output: GroupOutput, start: SnapshotFiles, now: SnapshotFiles) -> str | None:
    """Why the group cannot commit on ``now`` (None: it can)."""
    for path in output.group.input_files:
        if path not in now.data_files:
            return f"input file {path} is no longer live (another commit removed or rewrote it)"
        for delete in applying_deletes(table, now, path):
            if delete.content == DataFileContent.POSITION_DELETES and delete.file_path not in start.delete_files:
                return f"position delete {delete.file_path} on input file {path} was committed during the rewrite"
    return None


def _removed_deletes(table: Table, outputs: list[GroupOutput], now: SnapshotFiles) -> set[str]:
    """Position delete files and deletion vectors live now that name only input files of the batch."""
    inputs = {p for o in outputs for p in o.group.input_files}
    candidates = {
        d.file_path: d
        for o in outputs
        for f in o.group.files
        for d in f.deletes
        if d.content == DataFileContent.POSITION_DELETES and d.file_path in now.delete_files
    }
    return {path for path, d in candidates.items() if referenced_data_files(table, d) <= inputs}


def landed(load: Callable[[], Table], snapshot_id: int) -> bool:
    try:
        return load().metadata.snapshot_by_id(snapshot_id) is not None
    except Exception:
        return False


def commit_replace(load: Callable[[], Table], table: Table, replace: ReplaceSnapshot, what: str) -> bool:
    """Commit ``replace`` on ``table.metadata`` through the fence (S18) after the run's lease (S15).

    False: refused because the table moved (its manifests are removed; the caller builds it again).
    An error of unknown outcome keeps every file and raises ``CommitOutcomeUnknownError`` (S9).
    """
    fencing.guard(what)  # outside the try, which reads any error as an unknown outcome
    try:
        commit_fenced(table, table.metadata, table.metadata_location, replace.updates)
    except CommitFailedException:
        delete_quietly(table, replace.written)  # refused: nothing references them
        return False
    except Exception as exc:
        if not landed(load, replace.snapshot_id):
            raise CommitOutcomeUnknownError(
                f"{what} of snapshot {replace.snapshot_id}: outcome unknown ({first_line(exc)}); every file "
                "written is kept, the next orphan run removes them if it did not land"
            ) from exc
    return True


def commit_batch(
    load: Callable[[], Table], start: SnapshotFiles, data_sequence_number: int, outputs: list[GroupOutput]
) -> BatchResult:
    """Commit ``outputs`` as one ``replace`` snapshot (see the module's docstring)."""
    result = BatchResult()
    for _attempt in range(COMMIT_ATTEMPTS):
        table = load()
        current = table.current_snapshot()
        now = plan_snapshot(table, current) if current is not None else None
        valid = []
        for output in outputs:
            reason = "the table has no snapshot any more" if now is None else conflict(table, output, start, now)
            if reason is None:
                valid.append(output)
            else:
                result.failed.append((output.group.group_id, reason))
                delete_quietly(table, output.paths)
        outputs = valid
        if not outputs or now is None:
            return result
        deletes = _removed_deletes(table, outputs, now)
        removed = {p for o in outputs for p in o.group.input_files} | deletes
        added = [f for o in outputs for f in o.files]
        replace = replace_snapshot(table, table.metadata, removed, added, data_sequence_number)
        if not commit_replace(load, table, replace, "the compaction commit"):
            continue
        result.snapshot_id = replace.snapshot_id
        result.committed = outputs
        result.removed_delete_files = len(deletes)
        return result
    for output in outputs:
        result.failed.append((output.group.group_id, f"lost the commit race {COMMIT_ATTEMPTS} times; retry later"))
        delete_quietly(load(), output.paths)
    return result
