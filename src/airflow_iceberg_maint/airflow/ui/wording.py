"""Figures as people read them, one way everywhere (the status pages and the approval form alike).

Bytes in binary units (``512 B``, ``1.5 KiB``), counts with their noun in the right number
(``1 file``, ``7 files``), moments as a relative age beside the absolute UTC time, durations in
the largest unit that keeps them readable, and run outcomes as sentences.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
#: Nouns whose plural is not the noun plus "s".
_PLURALS = {"index": "indexes", "entry": "entries", "policy": "policies"}


def size(count: float) -> str:
    """Bytes as text: ``512 B``, ``1.5 KiB``, ``20.0 GiB``."""
    value = float(count)
    for unit in _UNITS:
        # Compared as shown (rounded): 1048575 bytes is "1.0 MiB", never "1024.0 KiB".
        if round(abs(value), 0 if unit == "B" else 1) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def plural(count: float, noun: str) -> str:
    """``1 file``, ``2 files``, ``0 files``, ``1.5 days``."""
    number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {noun if count == 1 else _PLURALS.get(noun, noun + 's')}"


def duration(seconds: float) -> str:
    """``0.25 s``, ``42 s``, ``23 min``, ``5 h 3 min``, ``2 days 4 h``."""
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return plural(days, "day") + (f" {hours} h" if hours else "")


def absolute(moment: datetime) -> str:
    """``2026-06-10 12:00:05 UTC``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def absolute_time(value: str | datetime | None) -> str:
    """An ISO 8601 text (or datetime) as ``absolute`` gives it; ``unknown time`` when absent or unreadable."""
    moment = parse_moment(value)
    return absolute(moment) if moment else "unknown time"


def relative(moment: datetime, now: datetime) -> str:
    """``just now``, ``3 min ago``, ``5 h ago``, ``2 days ago``; ``in 5 min`` for a moment ahead of ``now``."""
    seconds = (now - moment).total_seconds()
    if abs(seconds) < 60:
        return "just now"
    text = duration(abs(seconds))
    return f"{text} ago" if seconds > 0 else f"in {text}"


def parse_moment(value: str | datetime | None) -> datetime | None:
    """An ISO 8601 text (or a datetime) as an aware UTC datetime; None when absent or unreadable."""
    if value is None or value == "":
        return None
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def lag(snapshots_behind: int, lag_seconds: float | None) -> str:
    """An index lag in words: ``up to date``, ``1 snapshot behind (23 min)``."""
    if snapshots_behind <= 0:
        return "up to date"
    text = plural(snapshots_behind, "snapshot") + " behind"
    return text + (f" ({duration(lag_seconds)})" if lag_seconds is not None else "")


def _failed(counts: Mapping[str, int]) -> str:
    failed = counts.get("failed_count", 0)
    return f"; {plural(failed, 'delete')} failed" if failed else ""


def outcome(kind: str, dry_run: bool, counts: Mapping[str, int]) -> str:
    """What a successful run did (a dry run: would do), in words, from its recorded figures."""
    if kind == "orphans":
        found = size(counts.get("orphan_bytes", 0))
        if dry_run:
            return f"would delete {plural(counts.get('orphan_file_count', 0), 'orphan file')} ({found})"
        return f"deleted {plural(counts.get('deleted_file_count', 0), 'orphan file')} ({found} reclaimed)" + _failed(
            counts
        )
    if kind == "expiry":
        snapshots = plural(counts.get("expired_snapshot_count", 0), "snapshot")
        files = plural(counts.get("deleted_file_count", 0), "file")
        freed = size(counts.get("deleted_bytes", 0))
        if dry_run:
            return f"would expire {snapshots} and delete {files} ({freed})"
        return f"expired {snapshots}, deleted {files} ({freed} reclaimed)" + _failed(counts)
    figures = [
        size(value) if key.endswith("_bytes") else f"{key.removesuffix('_count').replace('_', ' ')}: {value}"
        for key, value in counts.items()
    ]
    return ("would do: " if dry_run else "") + ("; ".join(figures) or "nothing to do")
