"""The concurrent writer: appends, overwrites, row deletes and snapshot expiry, committed in a loop.

It runs in its own process and logs, after every commit, one JSON line: when the commit started
and finished (``time.monotonic``, one clock for all processes on Linux), the files the committed
metadata now references that it did not before (``added``) and those it no longer references
(``dropped``), read with the oracle (pyiceberg's inspect tables and metadata log), and the row
count each new snapshot must read (from the writer's own model of live ids).

A cutoff-0 orphan run may delete a file this writer has written but not yet committed: the
commit then names a missing file. The writer checks every file its commit added; if one is gone
it counts an in-flight loss and undoes that commit as a failed commit would (roll back, expire
the new snapshots; a lost metadata file is first written again from memory), so that every
retained snapshot stays readable and the test can hold it to that.

Beside this project's snapshot expiry (``beside_expiry``: another process commits to the table, dropping
references, then deletes the files only the expired snapshots reached) the writer expires nothing itself;
when the catalog moved on it reads the newer metadata before judging a file missing, logs the references
the expiry dropped as an ``external`` entry, and judges whether its own failed commit landed by main's head.

A commit that raised may still have landed (the catalog row was updated, then the error came): after
an error the writer reads the catalog's metadata pointer and the snapshot ids, and logs the commit as
``committed``, ``landed_after_error`` or ``failed`` (``outcome``), so its row model follows what the
catalog holds, not what the call returned.

Row model: pyiceberg's delete and overwrite commit up to three snapshots at once: DELETE drops the
data files whose rows all match the filter, OVERWRITE rewrites the files that match in part, APPEND
adds the new rows. Between DELETE and OVERWRITE the matching rows of the partly matching files are
still live, so a DELETE snapshot that is not the commit's last reads the rows before the commit less
those of the files it dropped (read with plain pyarrow), not the rows the commit keeps.
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import In
from pyiceberg.manifest import DataFileContent
from pyiceberg.serializers import ToOutputFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from tests.index.row_deletes import commit_position_deletes
from tests.orphans.scenario import rows
from tests.reliability import oracle

OPS = ("append", "append", "append", "overwrite", "delete_cow", "delete_positions", "expire")
KEEP_SNAPSHOTS = 6
FOLLOW_ATTEMPTS = 50  # reads of the catalog's metadata while a concurrent snapshot expiry keeps committing
# What a commit may raise on a loaded machine or under a cutoff-0 run: the writer then asks the catalog
# whether it landed. Anything else is a bug and stops the writer with its traceback.
UNKNOWN_OUTCOME = (FileNotFoundError, CommitFailedException, SQLAlchemyError, TimeoutError, ConnectionError)


class Writer:
    def __init__(
        self, table: Table, catalog: SqlCatalog, log_path: str, seed: int, beside_expiry: bool = False
    ) -> None:
        # Beside this project's snapshot expiry (another process committing to the table): the writer
        # expires nothing itself, and follows the expiry's commits (see ``_live_files`` and ``_gone``).
        self.beside_expiry = beside_expiry
        self.ops = tuple(op for op in OPS if op != "expire") if beside_expiry else OPS
        self.catalog = catalog
        self.name = ".".join(table.name())
        self.table = table
        self.rng = random.Random(seed)
        self.log_path = log_path
        self.ids = set(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
        self.next_id = max(self.ids, default=0) + 1
        self.refs = oracle.live_files(table)
        self.history: list[tuple[int | None, list[int], set[str], set[int]]] = []  # parent, new, added, ids before
        self.seq = 0
        current = table.current_snapshot()
        self._write(
            {
                "op": "initial",
                "start": time.monotonic(),
                "done": time.monotonic(),
                "added": sorted(self.refs),
                "dropped": [],
                "rows": {str(current.snapshot_id): len(self.ids)} if current else {},
                "rolled_back": False,
            }
        )

    def _write(self, entry: dict[str, Any]) -> None:
        entry["seq"] = self.seq
        self.seq += 1
        # Opened per entry: the log is complete on disk after each commit, and nothing is left open.
        with open(self.log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")

    def _new_rows(self, count: int) -> Any:
        batch = rows(self.next_id, count)
        self.next_id += count
        return batch

    def step(self) -> None:
        self.repair()
        op = self.rng.choice(self.ops)
        snapshots_before = {s.snapshot_id for s in self.table.metadata.snapshots}
        current_before = self.table.current_snapshot()
        location_before = self.table.metadata_location
        start = time.monotonic()
        planned: tuple[set[int], Callable[[], None]] | None = None
        outcome, error = "committed", ""
        try:
            planned = self._plan(op)
            if planned is None:
                return
            planned[1]()
        except UNKNOWN_OUTCOME as exc:
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            if planned is None or not self._landed(location_before, current_before):
                self._failed(op, start, exc)
                return
            outcome = "landed_after_error"  # the catalog moved on: the commit happened, whatever it raised
        ids_after = planned[0]
        done = time.monotonic()
        self.table = self.catalog.load_table(self.name) if self._metadata_exists() else self._restore_metadata()
        new = sorted(
            (s for s in self.table.metadata.snapshots if s.snapshot_id not in snapshots_before),
            key=lambda s: s.sequence_number,
        )
        refs, lost = self._refs_and_lost(new)
        added, dropped = refs - self.refs, self.refs - refs
        counts, unmodelled = self._row_model(new, ids_after)
        self._write(
            {
                "op": op,
                "start": start,
                "done": done,
                "added": sorted(added),
                "dropped": sorted(dropped),
                "rows": {str(k): v for k, v in counts.items()},
                "rolled_back": False,
                "lost": lost,
                "outcome": outcome,
                "error": error,
                "snapshots": [[x.snapshot_id, x.summary.operation.value if x.summary else None] for x in new],
                "unmodelled": unmodelled,
            }
        )
        self.refs = refs
        if new:
            parent = current_before.snapshot_id if current_before else None
            self.history.append((parent, [x.snapshot_id for x in new], added, self.ids))
        self.ids = ids_after
        if lost:
            self.repair()

    def _row_model(self, new: list[Snapshot], ids_after: set[int]) -> tuple[dict[int, int], dict[str, str]]:
        """The rows each new snapshot must read; snapshots the model cannot be built for, with why."""
        counts: dict[int, int] = {}
        unmodelled: dict[str, str] = {}
        for i, snapshot in enumerate(new):
            if i == len(new) - 1:
                counts[snapshot.snapshot_id] = len(ids_after)
            elif snapshot.summary is not None and snapshot.summary.operation == Operation.DELETE:
                # Drops whole files only: what was live before, less the rows of the files it dropped.
                parent = self.table.metadata.snapshot_by_id(snapshot.parent_snapshot_id or -1)
                if parent is None and snapshot.parent_snapshot_id is not None:  # a concurrent expiry took it
                    unmodelled[str(snapshot.snapshot_id)] = f"parent {snapshot.parent_snapshot_id} expired meanwhile"
                    continue
                try:
                    gone = (self._data_files(parent) if parent else set()) - self._data_files(snapshot)
                    dropped_ids: set[int] = set()
                    for path in gone:
                        with self.table.io.new_input(path).open() as stream:
                            dropped_ids.update(pq.read_table(stream, columns=["id"]).column("id").to_pylist())
                except FileNotFoundError as exc:  # the commit names a deleted file: repair undoes it
                    unmodelled[str(snapshot.snapshot_id)] = str(exc).splitlines()[0][:300]
                    continue
                counts[snapshot.snapshot_id] = len(self.ids - dropped_ids)
            else:  # the rewrite of partly matching files: the rows the commit keeps
                counts[snapshot.snapshot_id] = len(ids_after & self.ids)
        return counts, unmodelled

    def _data_files(self, snapshot: Snapshot) -> set[str]:
        return {
            e.data_file.file_path
            for m in snapshot.manifests(self.table.io)
            for e in m.fetch_manifest_entry(self.table.io, discard_deleted=True)
            if e.data_file.content == DataFileContent.DATA
        }

    def _landed(self, location_before: str, current_before: Snapshot | None) -> bool:
        """Whether a commit that raised landed: the catalog moved on (beside an expiry: main moved on)."""
        if self._catalog_location() == location_before:
            return False
        if not self.beside_expiry:
            return True  # nothing else commits to the table
        try:
            head = self.catalog.load_table(self.name).current_snapshot()
        except FileNotFoundError:
            return True  # the expiry's metadata files are never deleted: this is the writer's
        return current_before is None or head is None or head.snapshot_id != current_before.snapshot_id

    def _catalog_location(self) -> str | None:
        """The metadata file the catalog's row names now: whether a commit landed, without reading that file."""
        namespace, _, table_name = self.name.rpartition(".")
        with Session(self.catalog.engine) as session:
            row = session.execute(
                select(IcebergTables.metadata_location).where(
                    IcebergTables.catalog_name == self.catalog.name,
                    IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == table_name,
                )
            ).scalar_one()
        return row

    def repair(self) -> None:
        """Undo, as failed commits, every commit from the first one whose added files are now missing.

        A file goes missing when a cutoff-0 run deleted it before the commit (in flight), or listed it
        before the commit and deleted it after (the race only a cutoff longer than a write closes).
        A missing metadata file of the log only (no snapshot's file) cannot break a read: it is logged."""
        gone = self._gone()
        if not gone:
            return
        broken = next((i for i, (_, _, added, _) in enumerate(self.history) if added & gone), None)
        start = time.monotonic()
        if broken is None:
            self._write(
                {
                    "op": "metadata_log_lost",
                    "start": start,
                    "done": start,
                    "added": [],
                    "dropped": sorted(gone),
                    "rows": {},
                    "rolled_back": False,
                    "lost": sorted(gone),
                }
            )
            self.refs -= gone
            return
        parent, _, _, ids_before = self.history[broken]
        doomed = [sid for _, new, _, _ in self.history[broken:] for sid in new]
        if parent is None or self.table.metadata.snapshot_by_id(parent) is None:
            raise RuntimeError(f"cannot undo: the parent {parent} of a commit with missing files is gone")
        self._undo_commit(lambda: self.table.manage_snapshots().rollback_to_snapshot(parent).commit())
        present = {x.snapshot_id for x in self.table.metadata.snapshots}
        self._undo_commit(
            lambda: self.table.maintenance.expire_snapshots().by_ids([x for x in doomed if x in present]).commit()
        )
        del self.history[broken:]
        self.ids = ids_before
        self.table = self.catalog.load_table(self.name) if self._metadata_exists() else self._restore_metadata()
        refs = oracle.live_files(self.table)
        self._write(
            {
                "op": "undo",
                "start": start,
                "done": time.monotonic(),
                "added": sorted(refs - self.refs),
                "dropped": sorted(self.refs - refs),
                "rows": {},
                "rolled_back": True,
                "lost": sorted(gone),
                "undone_snapshots": doomed,
            }
        )
        self.refs = refs

    def _undo_commit(self, commit: Callable[[], None]) -> None:
        """One commit of an undo. A cutoff-0 run may delete the metadata file it starts from (the race
        only a longer cutoff closes: listed in flight, deleted after its commit); the commit then fails
        reading it, before anything lands, so the file is written again and the commit retried."""
        for _ in range(FOLLOW_ATTEMPTS):
            try:
                commit()
                return
            except FileNotFoundError:
                self.table = self._restore_metadata()
        raise RuntimeError(f"{self.name}: the undo's metadata file was deleted during each of {FOLLOW_ATTEMPTS} tries")

    def _gone(self) -> set[str]:
        """The files the committed metadata references that are missing.

        Beside an expiry, a file may be missing because the expiry committed metadata that no longer
        references it, then deleted it: when the catalog moved on, the writer first takes in what it
        references now (logged as an ``external`` entry), and judges against that."""
        for _ in range(FOLLOW_ATTEMPTS):
            gone = set(oracle.missing(self.refs))
            if not gone or not self.beside_expiry or self._catalog_location() == self.table.metadata_location:
                return gone
            self.table = self.catalog.load_table(self.name)
            self._external(self._live_files()[0])
        raise RuntimeError(f"{self.name}: the catalog moved on during each of {FOLLOW_ATTEMPTS} checks")

    def _external(self, refs: set[str]) -> None:
        """Log what another process's commit (a snapshot expiry) changed in the references."""
        now = time.monotonic()
        self._write(
            {
                "op": "external",
                "start": now,
                "done": now,
                "added": sorted(refs - self.refs),
                "dropped": sorted(self.refs - refs),
                "rows": {},
                "rolled_back": False,
                "lost": [],
            }
        )
        self.refs = refs

    def _live_files(self, new_only: bool = False) -> tuple[set[str], list[str]]:
        """What the committed metadata references (the oracle), read from ``self.table``, and which of those
        files (only those not in ``self.refs`` when ``new_only``) are missing.

        Beside an expiry, metadata read before the expiry's commit may name files the expiry deletes right
        after it: the answer counts only if the catalog still names the metadata read once the files were
        checked, else the newer metadata is read. A file missing while the metadata naming it is the
        catalog's is lost: ``FileNotFoundError`` is raised then, as it always is."""
        table = self.table
        for _ in range(FOLLOW_ATTEMPTS):
            try:
                refs = oracle.live_files(table)
                missing = oracle.missing(refs - self.refs if new_only else refs)
            except FileNotFoundError:
                if not self.beside_expiry or self._catalog_location() == table.metadata_location:
                    raise
            else:
                if not self.beside_expiry or self._catalog_location() == table.metadata_location:
                    return refs, missing
            table = self.catalog.load_table(self.name)
        raise RuntimeError(f"{self.name}: the catalog moved on during each of {FOLLOW_ATTEMPTS} reads")

    def _refs_and_lost(self, new: list[Any]) -> tuple[set[str], list[str]]:
        """What the committed metadata references, and which of the files this commit added are missing.

        When an orphan run deleted a new snapshot's manifest list or manifest before the commit, the
        oracle cannot read that snapshot: the commit's known files are then its metadata file and the
        new snapshots' manifest lists and manifests that can still be read."""
        try:
            return self._live_files(new_only=True)
        except FileNotFoundError:
            known = [self.table.metadata_location, *(s.manifest_list for s in new)]
            for snapshot in new:
                if not oracle.missing([snapshot.manifest_list]):
                    known += [m.manifest_path for m in snapshot.manifests(self.table.io)]
            lost = oracle.missing(known)
            if not lost:
                raise
            return self.refs | set(known), lost

    def _failed(self, op: str, start: float, exc: BaseException) -> None:
        """The write failed before its commit (the catalog still names the metadata it had): a cutoff-0 run
        deleted a file it had not committed yet (an overwrite's staged manifest list, say), or the catalog
        refused or timed out. Allowed, if every committed file is still there."""
        self.table = self.catalog.load_table(self.name)
        refs, missing = self._live_files()
        if self.beside_expiry and refs < self.refs:  # the expiry's commit (which made this one fail) dropped some
            self._external(refs)
        if refs != self.refs or missing:
            raise RuntimeError(f"{op} failed ({exc!r}) and the committed state is not intact") from exc
        self._write(
            {
                "op": f"failed_{op}",
                "start": start,
                "done": time.monotonic(),
                "added": [],
                "dropped": [],
                "rows": {},
                "rolled_back": False,
                "lost": [],
                "outcome": "failed",
                "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
            }
        )

    def _metadata_exists(self) -> bool:
        return bool(self.table.metadata_location) and not oracle.missing([self.table.metadata_location])

    def _restore_metadata(self) -> Table:
        """The catalog names a metadata file an orphan run deleted before the catalog commit: write it again."""
        ToOutputFile.table_metadata(self.table.metadata, self.table.io.new_output(self.table.metadata_location))
        return self.catalog.load_table(self.name)

    def _plan(self, op: str) -> tuple[set[int], Callable[[], None]] | None:
        """One change: the live ids after it and the call that commits it, or None when there is nothing to do.

        The ids are known before the call, so a commit that raised but landed is still modelled."""
        table, ids = self.table, self.ids
        if op == "append":
            batch = self._new_rows(self.rng.randint(5, 40))
            return ids | set(batch.column("id").to_pylist()), lambda: table.append(batch)
        if op == "overwrite" and ids:
            below = self.rng.choice(sorted(ids))
            replacement = self._new_rows(self.rng.randint(3, 15))
            return (
                {i for i in ids if i >= below} | set(replacement.column("id").to_pylist()),
                lambda: table.overwrite(replacement, overwrite_filter=f"id < {below}"),
            )
        if op == "delete_cow" and ids:
            victims = set(self.rng.sample(sorted(ids), min(len(ids), self.rng.randint(1, 8))))
            return ids - victims, lambda: table.delete(In("id", victims))  # type: ignore[arg-type, call-arg]
        if op == "delete_positions" and ids:
            return self._delete_positions()
        if op == "expire" and len(table.metadata.snapshots) > KEEP_SNAPSHOTS:
            ordered = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
            current = table.current_snapshot()
            old = [
                s.snapshot_id
                for s in ordered[:-KEEP_SNAPSHOTS]
                if current is None or s.snapshot_id != current.snapshot_id
            ]
            if old:
                return set(ids), lambda: table.maintenance.expire_snapshots().by_ids(old).commit()
        return None

    def _delete_positions(self) -> tuple[set[int], Callable[[], None]] | None:
        """Merge-on-read position deletes of live rows of one current data file."""
        snapshot = self.table.current_snapshot()
        if snapshot is None:
            return None
        data = [
            e.data_file.file_path
            for m in snapshot.manifests(self.table.io)
            for e in m.fetch_manifest_entry(self.table.io)
            if e.data_file.content == 0
        ]
        path = self.rng.choice(sorted(data))
        with self.table.io.new_input(path).open() as stream:
            file_ids = pq.read_table(stream, columns=["id"]).column("id").to_pylist()
        live = [(pos, i) for pos, i in enumerate(file_ids) if i in self.ids]
        if not live:
            return None
        chosen = self.rng.sample(live, min(len(live), self.rng.randint(1, 4)))

        def commit() -> None:
            self.table = commit_position_deletes(self.table, {path: [pos for pos, _ in chosen]})

        return self.ids - {i for _, i in chosen}, commit


def run(
    catalog_name: str,
    uri: str,
    warehouse: str,
    name: str,
    log_path: str,
    stop_path: str,
    seed: int,
    result_path: str,
    beside_expiry: bool = False,
) -> None:
    """Commit until ``stop_path`` exists; write a result file (the traceback on failure)."""
    try:
        catalog = SqlCatalog(catalog_name, uri=uri, warehouse=warehouse)
        writer = Writer(catalog.load_table(name), catalog, log_path, seed, beside_expiry)
        while not os.path.exists(stop_path):
            writer.step()
        writer.repair()  # the orphan runs have stopped: a file deleted after the last check is found now
        result: dict[str, Any] = {"ok": True, "commits": writer.seq - 1}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    with open(result_path, "w") as fh:
        json.dump(result, fh)
