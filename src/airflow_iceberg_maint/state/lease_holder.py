"""Whether the process that holds a table lease is still alive, judged only on its own host (S15).

A lease records its holder's process as ``host/boot/pid-namespace/pid/start``: the host name, the
kernel's boot id, the pid namespace (containers on one kernel each have their own), the pid and the
process's start time in clock ticks since boot. Another process on the same host, boot and pid
namespace can tell for sure whether that process still runs: the pid is gone, or it now names a
process started at another time (a reused pid). Anywhere else, nothing is known and the lease's
time bounds the wait. Without ``/proc`` (not Linux) no process is recorded.
"""

from __future__ import annotations

import os
import socket
from functools import cache


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), or None when no such process runs
    (a zombie, killed and not yet reaped by its parent, has ended)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count fields after its last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


@cache
def _place() -> str | None:
    """This host, boot and pid namespace; None without ``/proc``."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None
    return None if boot is None else f"{socket.gethostname()}/{boot}/{namespace}"


def this_process() -> str:
    """This process, as a lease records its holder ("" when it cannot be told)."""
    place, pid = _place(), os.getpid()
    start = start_ticks(pid)
    return "" if place is None or start is None else f"{place}/{pid}/{start}"


def gone_here(process: str) -> bool:
    """Whether ``process`` (as ``this_process`` wrote it) is known to have ended: on this host, boot and pid
    namespace, its pid is free or names a process started at another time. Anything else is not known: False."""
    place = _place()
    head, _, tail = process.rpartition("/")
    where, _, pid = head.rpartition("/")
    if not place or where != place or not pid.isdigit():
        return False
    return start_ticks(int(pid)) != tail
