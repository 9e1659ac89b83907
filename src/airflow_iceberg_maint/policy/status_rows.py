"""The status page's rows, built from stored facts only: one row per table of the policies and index definitions.

Inputs are the policy and index-definition files and the stored records (cleanup states of every
job, run history, index lags, the tables of the last planning run), all read in bulk by the caller.
Nothing here calls a catalog, so a page over 1,000 tables costs one read of the records and two
small file parses.

Every figure of a row comes from one cleanup state: whether the table is due, when it was last
cleaned (by any run, scheduled or manual, whether or not a policy attaches) and its last run. A table
a compaction policy attaches also shows that policy's evaluation, from the compaction state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.policy.due import Evaluation, evaluate, unattached
from airflow_iceberg_maint.policy.index_definitions import TableDefinition
from airflow_iceberg_maint.policy.policies import DATA_COMPACTION, ORPHAN_FILE_REMOVAL, Policy, policy_for_table
from airflow_iceberg_maint.state.cleanup import CleanupState
from airflow_iceberg_maint.state.status_records import (
    INDEX_LAG_PREFIX,
    POLICY_TABLES_KEY,
    RUNS_PREFIX,
    STATE_PREFIX,
    RunRecord,
    last_attempt,
)

_SECONDS_PER_DAY = 86_400.0
_UNREADABLE = (ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class Records:
    """Stored facts, keyed for lookup by table name."""

    #: table -> job -> the latest attempt under that table name (a recreated table: its newest UUID)
    states: Mapping[str, Mapping[str, CleanupState]] = field(default_factory=dict)
    lags: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # table -> index -> lag
    lag_history: Mapping[str, Mapping[str, list[Any]]] = field(default_factory=dict)  # table -> index -> points
    runs: Mapping[str, list[RunRecord]] = field(default_factory=dict)  # table -> runs, oldest first
    policy_tables: Mapping[str, str] = field(default_factory=dict)  # table -> uuid, from the last planning run

    @classmethod
    def build(cls, states: Iterable[CleanupState], rows: Iterable[tuple[str, str]]) -> Records:
        """From cleanup states and ``(key, JSON)`` record rows; other keys are ignored, unreadable values skipped."""
        latest: dict[str, dict[str, CleanupState]] = {}
        for state in states:
            known = latest.setdefault(state.table, {}).get(state.job)
            if known is None or _attempted(state) > _attempted(known):
                latest[state.table][state.job] = state
        lags: dict[str, Mapping[str, Any]] = {}
        history: dict[str, Mapping[str, list[Any]]] = {}
        runs: dict[str, list[RunRecord]] = {}
        policy_tables: dict[str, str] = {}
        for key, value in rows:
            try:
                body = json.loads(value)
                if key.startswith(INDEX_LAG_PREFIX):
                    lags[str(body["table"])] = dict(body["indexes"])
                    history[str(body["table"])] = {str(k): list(v) for k, v in (body.get("history") or {}).items()}
                elif key.startswith(RUNS_PREFIX):
                    runs[str(body["table"])] = [RunRecord.from_json(r) for r in body["runs"]]
                elif key == POLICY_TABLES_KEY:
                    policy_tables = {str(t): str(u) for t, u in body["tables"].items()}
            except _UNREADABLE:
                continue  # a hand-edited record must not take the page down
        return cls(latest, lags, history, runs, policy_tables)

    @classmethod
    def from_variables(cls, rows: Iterable[tuple[str, str]]) -> Records:
        """From ``(key, value)`` pairs of Airflow Variables: the cleanup states and the other records."""
        states, others = [], []
        for key, value in rows:
            if key.startswith(STATE_PREFIX):
                try:
                    states.append(CleanupState.from_json(json.loads(value)))
                except _UNREADABLE:
                    continue
            else:
                others.append((key, value))
        return cls.build(states, others)


def _attempted(state: CleanupState) -> datetime:
    return state.last_attempt_at or state.last_success_at or datetime.min.replace(tzinfo=UTC)


def run_history(history: Sequence[RunRecord], states: Iterable[CleanupState]) -> list[RunRecord]:
    """The recorded runs plus each state's last attempt that the history lacks (a run recorded before
    the history existed, or by a task that keeps only the state), oldest first."""
    seen = {(r.kind, r.at) for r in history}
    extra = [r for r in map(last_attempt, states) if r is not None and (r.kind, r.at) not in seen]
    return sorted([*history, *extra], key=lambda r: r.at)


@dataclass(frozen=True)
class IndexStatus:
    name: str
    lag: Mapping[str, Any] | None  # None: never checked
    history: Sequence[Mapping[str, Any]] = ()  # the last checks, oldest first

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "lag": dict(self.lag) if self.lag else None, "history": list(self.history)}


@dataclass(frozen=True)
class TableStatus:
    table: str
    evaluation: Evaluation
    state: CleanupState | None  # the orphan-removal state: the one the evaluation read
    indexes: Sequence[IndexStatus]
    runs: Sequence[RunRecord]  # every kind, oldest first
    now: datetime
    compaction: Evaluation | None = None  # the compaction policy's evaluation; None: no such policy attaches

    @property
    def last_cleaned_at(self) -> datetime | None:
        """The last successful real cleanup, by any run, policy or not (None: never cleaned)."""
        return self.state.last_success_at if self.state else None

    @property
    def days_since_last_cleanup(self) -> float | None:
        last = self.last_cleaned_at
        return None if last is None else round((self.now - last).total_seconds() / _SECONDS_PER_DAY, 4)

    @property
    def last_run(self) -> RunRecord | None:
        return last_attempt(self.state) if self.state else None

    def to_json(self) -> dict[str, Any]:
        last_run, last_cleaned = self.last_run, self.last_cleaned_at
        return {
            "table": self.table,
            "policy": self.evaluation.policy,
            "due": self.evaluation.due,
            "last_cleaned_at": last_cleaned.isoformat() if last_cleaned else None,
            "days_since_last_cleanup": self.days_since_last_cleanup,
            "reason": self.evaluation.reason,
            "last_run": None if last_run is None else _last_run_json(last_run),
            "indexes": [i.to_json() for i in self.indexes],
            "runs": [r.to_json() for r in self.runs],
            "compaction": None if self.compaction is None else self.compaction.policy_json(),
        }


def _last_run_json(run: RunRecord) -> dict[str, Any]:
    # From the cleanup state, which keeps no phases nor approved report: those are in ``runs``.
    return {k: v for k, v in run.to_json().items() if k not in ("kind", "phase_seconds", "approved_report")}


def table_rows(
    policies: Sequence[Policy[Any]],
    definitions: Sequence[TableDefinition],
    records: Records,
    now: datetime,
    source: str = "the policies",
) -> list[TableStatus]:
    """One row per table named by a policy or an index definition, or with a stored record.

    A glob's tables are known from the records: the last planning run's tables and any table with a
    recorded run (a manual run of a table no policy attaches shows too).
    """
    indexes = {d.table: [i.name for i in d.indexes] for d in definitions}
    names = set(indexes) | set(records.states) | set(records.policy_tables) | set(records.lags) | set(records.runs)
    names.update(t for p in policies for t in p.exact_tables)
    rows = []
    for table in sorted(names):
        states = records.states.get(table, {})
        state = states.get(ORPHAN_FILE_REMOVAL)
        uuid = records.policy_tables.get(table) or (state.table_uuid if state else "")
        policy = policy_for_table(policies, table)
        evaluation = unattached(table, uuid, source) if policy is None else evaluate(table, uuid, policy, state, now)
        lags, history = records.lags.get(table, {}), records.lag_history.get(table, {})
        names_of_indexes = indexes.get(table, []) + sorted(set(lags) - set(indexes.get(table, [])))
        statuses = [IndexStatus(n, lags.get(n), history.get(n, [])) for n in names_of_indexes]
        runs = run_history(records.runs.get(table, []), states.values())
        compacting = policy_for_table(policies, table, DATA_COMPACTION)
        compaction = None
        if compacting is not None:
            compaction = evaluate(table, uuid, compacting, states.get(DATA_COMPACTION), now)
        rows.append(TableStatus(table, evaluation, state, statuses, runs, now, compaction))
    return rows
