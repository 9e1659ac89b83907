"""When an index lags "too much": thresholds over the core's ``IndexLag``.

``index.lag`` measures lag; deciding that a lag is worth acting on is a scheduling concern, so
the threshold lives here, shared by the sensor, its trigger, the event trigger and the lag plan
(the Airflow hook reads the lags).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.lifecycle.lag import IndexLag
from airflow_iceberg_maint.policy.values import optional_number
from airflow_iceberg_maint.state.status_records import RecordLog, RecordStore, index_lag_key, record_index_lags


@dataclass(frozen=True)
class LagThreshold:
    """An index lags when it is stale and exceeds any bound given; with no bound, any staleness counts.
    An index without an extract lags as soon as its table has a snapshot.

    ``snapshots``: more than this many commits behind; ``seconds``: the table's current snapshot
    is more than this much newer than the extract's (unknown when the extract's snapshot was
    expired or no extract exists, which counts as exceeded); ``added_files``: more than this
    many data and delete files added since the extract.
    """

    snapshots: int | None = None
    seconds: float | None = None
    added_files: int | None = None

    @classmethod
    def from_arguments(cls, snapshots: Any, seconds: Any, added_files: Any) -> LagThreshold:
        """Typed bounds from (possibly Jinja-rendered) operator arguments; negative bounds are refused."""
        values = {
            "max_snapshots_behind": optional_number(snapshots, "max_snapshots_behind"),
            "max_lag_seconds": optional_number(seconds, "max_lag_seconds"),
            "max_added_files": optional_number(added_files, "max_added_files"),
        }
        for name, value in values.items():
            if value is not None and value < 0:
                raise InvalidInputError(f"argument {name}: expected a number >= 0, got {value:g}")
        for name in ("max_snapshots_behind", "max_added_files"):
            value = values[name]
            if value is not None and value != int(value):
                raise InvalidInputError(f"argument {name}: expected a whole number, got {value:g}")
        snaps, secs, files = values.values()
        return cls(
            snapshots=None if snaps is None else int(snaps),
            seconds=secs,
            added_files=None if files is None else int(files),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "max_snapshots_behind": self.snapshots,
            "max_lag_seconds": self.seconds,
            "max_added_files": self.added_files,
        }

    @classmethod
    def from_json(cls, body: Any) -> LagThreshold:
        """The bounds ``to_json`` wrote; none (any staleness counts) when ``body`` is not a mapping."""
        bounds = body if isinstance(body, dict) else {}
        return cls(bounds.get("max_snapshots_behind"), bounds.get("max_lag_seconds"), bounds.get("max_added_files"))

    def exceeded(self, lag: IndexLag) -> list[str]:
        """Why the lag exceeds the threshold (empty: it does not)."""
        if not lag.stale:
            return []
        if lag.extract_snapshot_id is None:
            return ["no extract yet"]  # an index without an extract serves no lookup, whatever the bounds
        if self.snapshots is None and self.seconds is None and self.added_files is None:
            return [f"stale: {lag.snapshots_behind} snapshot(s) behind"]
        reasons = []
        if self.snapshots is not None and lag.snapshots_behind > self.snapshots:
            reasons.append(f"{lag.snapshots_behind} snapshot(s) behind > {self.snapshots}")
        if self.seconds is not None:
            if lag.lag_seconds is None:
                reasons.append("lag in seconds unknown (no extract, or its snapshot was expired)")
            elif lag.lag_seconds > self.seconds:
                reasons.append(f"{lag.lag_seconds:g}s behind > {self.seconds:g}s")
        added = lag.added_files.data + lag.added_files.delete
        if self.added_files is not None and added > self.added_files:
            reasons.append(f"{added} file(s) added > {self.added_files}")
        return reasons


@dataclass(frozen=True)
class CheckedLag:
    lag: IndexLag
    reasons: list[str]

    @property
    def lagging(self) -> bool:
        return bool(self.reasons)

    def to_json(self) -> dict[str, Any]:
        """The lag (CLI ``index lag`` keys) plus ``lagging`` and ``reasons``: small, for XCom and events."""
        return {**self.lag.to_json(), "lagging": self.lagging, "reasons": self.reasons}


def record_refreshed_lag(store: RecordStore, table: str, lag: IndexLag, at: datetime, log: RecordLog) -> None:
    """Record an index's lag measured right after a task committed an extract of it, checked against the
    threshold its last recorded check used (none recorded: any staleness lags). Without this, the page
    kept showing the lag measured before the refresh until the next check."""
    try:
        known = ((store.get(index_lag_key(table)) or {}).get("indexes") or {}).get(lag.index) or {}
        threshold = LagThreshold.from_json(known.get("threshold"))
        checked = CheckedLag(lag, threshold.exceeded(lag))
        record_index_lags(store, table, [{**checked.to_json(), "threshold": threshold.to_json()}], at, log)
    except Exception as exc:  # the dashboard must never fail the maintenance
        log.warning("index lag of %s not recorded for the status page: %s", table, exc)
