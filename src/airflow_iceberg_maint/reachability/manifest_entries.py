"""A manifest's live entries (whole, with their data files), decoded once within a run.

A committed manifest names the same bytes forever, so a run that needs one manifest's entries
more than once (a compaction plans from the snapshot's manifests, then writes again the ones
holding its input files in its commit, and reads the new snapshot for dangling deletes) can
reuse what it decoded first. The memo exists only inside ``reading_once(sequence_number)`` and
keeps only the manifests committed at or before that sequence number (the run's starting
snapshot's): what the run holds anyway in its plan. Manifests committed since (the run's own
commits, concurrent writers') are decoded each time, so a run of many commits does not grow it.

The key is the manifest as its manifest list describes it: the path, the length, and the values
its entries inherit (the manifest's sequence number and adding snapshot). A manifest read with
other inherited values, or not yet committed (sequence number unassigned), is decoded again.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntry, ManifestFile

_Key = tuple[str, int, int, int | None]


@dataclass
class _Memo:
    up_to: int
    entries: dict[_Key, tuple[ManifestEntry, ...]] = field(default_factory=dict)


_memo: ContextVar[_Memo | None] = ContextVar("manifest_entries", default=None)


@contextmanager
def reading_once(sequence_number: int) -> Iterator[None]:
    """Within the block, each manifest committed at or before ``sequence_number`` is decoded at most
    once (in this thread); others are decoded each time."""
    token = _memo.set(_Memo(sequence_number))
    try:
        yield
    finally:
        _memo.reset(token)


def live_entries(io: FileIO, manifest: ManifestFile) -> tuple[ManifestEntry, ...]:
    """The entries of ``manifest`` that are not ``DELETED``, their inherited fields filled in by pyiceberg."""
    memo = _memo.get()
    key = (manifest.manifest_path, manifest.manifest_length, manifest.sequence_number, manifest.added_snapshot_id)
    if memo is not None and key in memo.entries:
        return memo.entries[key]
    entries = tuple(manifest.fetch_manifest_entry(io, discard_deleted=True))
    if memo is not None and 0 <= manifest.sequence_number <= memo.up_to:
        memo.entries[key] = entries
    return entries
