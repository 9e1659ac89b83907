"""A manifest list's digest stored as a delta over another list's (S22): lists of one table overlap.

A fast append's manifest list names the new manifests and every manifest of its parent's list,
so a table's N lists name about N²/2 manifests in all, and their full digests would store (and a
warm run decode) the same paths again and again. A list's digest is stored instead, when that
is much smaller, as a layout over a *base*: slices of a full digest's entries, and entries of
its own. The base is named by its path and by the checksum of its digest, so a delta is used
only over the very digest it was made from; a base is always a full digest, never a delta, so
a list costs at most one more digest read, and a run keeps the bases it met (``Bases``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

#: What a file names: paths, and the size of each (a manifest's length, a content file's size).
Entries = tuple[list[str], list[int]]
#: [start, stop]: the base's entries start to stop; [-1, count]: the next count own entries.
Layout = list[list[int]]

#: Bytes the bases held in a process take, at most, by ``_weight`` (a base larger than that alone is held alone).
MAX_HELD_BYTES = 64 * 1024 * 1024
_ENTRY_OVERHEAD = 120  # a str and an int object and two list slots, beside the path's characters


def layout(base: Entries, entries: Entries) -> tuple[Layout, Entries]:
    """``entries`` as runs of ``base`` and own entries, in order; returns the layout and the own entries."""
    where = {path: i for i, path in enumerate(base[0])}
    paths, sizes = entries
    runs: Layout = []
    own: Entries = ([], [])
    k = 0
    while k < len(paths):
        i = where.get(paths[k], -1)
        if i < 0 or base[1][i] != sizes[k]:
            own[0].append(paths[k])
            own[1].append(sizes[k])
            if runs and runs[-1][0] == -1:
                runs[-1][1] += 1
            else:
                runs.append([-1, 1])
            k += 1
            continue
        start = i
        while k < len(paths) and i < len(base[0]) and base[0][i] == paths[k] and base[1][i] == sizes[k]:
            i += 1
            k += 1
        runs.append([start, i])
    return runs, own


def apply(base: Entries, runs: list[Any], own: Entries) -> Entries:
    """The entries ``layout`` described (``runs`` as read: checked here). Raises ValueError when they
    do not fit the base and own entries."""
    paths: list[str] = []
    sizes: list[int] = []
    taken = 0
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and all(type(n) is int for n in run)):
            raise ValueError("a run of its layout is not two numbers")
        start, stop = run
        if start == -1:
            if stop < 1 or taken + stop > len(own[0]):
                raise ValueError("its layout takes more own entries than it has")
            paths += own[0][taken : taken + stop]
            sizes += own[1][taken : taken + stop]
            taken += stop
        elif 0 <= start < stop <= len(base[0]):
            paths += base[0][start:stop]
            sizes += base[1][start:stop]
        else:
            raise ValueError("a run of its layout is outside its base")
    if taken != len(own[0]):
        raise ValueError("its layout leaves own entries out")
    return paths, sizes


def worth_it(own: Entries, entries: Entries) -> bool:
    """A delta is stored only when it holds at most a quarter of the entries: bases then stay few."""
    return 4 * len(own[0]) <= len(entries[0])


class Bases:
    """Full list digests a process met, by (store folder, path), with their checksums; the least
    recently used go first once they weigh more than ``MAX_HELD_BYTES``. Thread-safe."""

    def __init__(self) -> None:
        self._held: OrderedDict[tuple[str, str], tuple[str, Entries]] = OrderedDict()
        self._weight = 0
        self._lock = threading.Lock()

    def get(self, folder: str, path: str, checksum: str) -> Entries | None:
        with self._lock:
            held = self._held.get((folder, path))
            if held is None or held[0] != checksum:
                return None
            self._held.move_to_end((folder, path))
            return held[1]

    def latest(self, folder: str) -> tuple[str, str, Entries] | None:
        """The base met last in ``folder``: (path, checksum, entries)."""
        with self._lock:
            for (held_folder, path), (checksum, entries) in reversed(self._held.items()):
                if held_folder == folder:
                    return path, checksum, entries
        return None

    def put(self, folder: str, path: str, checksum: str, entries: Entries) -> None:
        with self._lock:
            self._drop(folder, path)
            self._held[(folder, path)] = (checksum, entries)
            self._weight += _weight(entries)
            while self._weight > MAX_HELD_BYTES and len(self._held) > 1:
                _, (_, dropped) = self._held.popitem(last=False)
                self._weight -= _weight(dropped)

    def drop(self, folder: str, path: str) -> None:
        with self._lock:
            self._drop(folder, path)

    def _drop(self, folder: str, path: str) -> None:
        old = self._held.pop((folder, path), None)
        if old is not None:
            self._weight -= _weight(old[1])


def _weight(entries: Entries) -> int:
    return sum(map(len, entries[0])) + _ENTRY_OVERHEAD * len(entries[0])
