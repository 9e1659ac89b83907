"""The status page's rows, built from stored facts only: one row per table of the policies and index definitions.

Inputs are the policy and index-definition files and the stored records (cleanup state, index lags,
the tables of the last planning run), all read in bulk by the caller. Nothing here calls a catalog,
so a page over 1,000 tables costs one read of the records and two small file parses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_maint.airflow.index_definitions import TableDefinition
from airflow_iceberg_maint.airflow.state_store import KEY_PREFIX as STATE_PREFIX
from airflow_iceberg_maint.airflow.status_records import INDEX_LAG_PREFIX, POLICY_TABLES_KEY
from airflow_iceberg_maint.policy.due import Evaluation, evaluate, unattached
from airflow_iceberg_maint.policy.policies import ORPHAN_FILE_REMOVAL, Policy, policy_for_table
from airflow_iceberg_maint.policy.state import CleanupState


@dataclass(frozen=True)
class Records:
    """Stored facts, keyed for lookup by table name."""

    states: Mapping[str, CleanupState] = field(default_factory=dict)  # the latest attempt of each table name
    lags: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # table -> index -> lag
    policy_tables: Mapping[str, str] = field(default_factory=dict)  # table -> uuid, from the last planning run

    @classmethod
    def build(cls, states: Iterable[CleanupState], rows: Iterable[tuple[str, str]]) -> Records:
        """From cleanup states and ``(key, JSON)`` record rows; other keys are ignored, unreadable values skipped."""
        latest: dict[str, CleanupState] = {}
        for state in states:
            known = latest.get(state.table)
            if known is None or _attempted(state) > _attempted(known):
                latest[state.table] = state  # a dropped and recreated table: its newest UUID
        lags: dict[str, Mapping[str, Any]] = {}
        policy_tables: dict[str, str] = {}
        for key, value in rows:
            try:
                body = json.loads(value)
                if key.startswith(INDEX_LAG_PREFIX):
                    lags[str(body["table"])] = dict(body["indexes"])
                elif key == POLICY_TABLES_KEY:
                    policy_tables = {str(t): str(u) for t, u in body["tables"].items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a hand-edited record must not take the page down
        return cls(latest, lags, policy_tables)

    @classmethod
    def from_variables(cls, rows: Iterable[tuple[str, str]]) -> Records:
        """From ``(key, value)`` pairs of Airflow Variables: the cleanup states and the other records."""
        state_prefix = f"{STATE_PREFIX}.{ORPHAN_FILE_REMOVAL}."
        states, others = [], []
        for key, value in rows:
            if key.startswith(state_prefix):
                try:
                    states.append(CleanupState.from_json(json.loads(value)))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
            else:
                others.append((key, value))
        return cls.build(states, others)


def _attempted(state: CleanupState) -> datetime:
    return state.last_attempt_at or state.last_success_at or datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class IndexStatus:
    name: str
    lag: Mapping[str, Any] | None  # None: never checked

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "lag": dict(self.lag) if self.lag else None}


@dataclass(frozen=True)
class TableStatus:
    table: str
    evaluation: Evaluation
    state: CleanupState | None
    indexes: Sequence[IndexStatus]

    def to_json(self) -> dict[str, Any]:
        state = self.state
        return {
            "table": self.table,
            "policy": self.evaluation.policy,
            "due": self.evaluation.due,
            "days_since_last_cleanup": self.evaluation.days_since_last_cleanup,
            "reason": self.evaluation.reason,
            "last_run": None
            if state is None or state.last_attempt_at is None
            else {
                "at": state.last_attempt_at.isoformat(),
                "dry_run": state.last_attempt_dry_run,
                "status": state.last_attempt_status,
                "counts": dict(state.last_attempt_counts),
                "error": state.last_error,
                "report": state.last_report,
            },
            "indexes": [i.to_json() for i in self.indexes],
        }


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
    names = set(indexes) | set(records.states) | set(records.policy_tables) | set(records.lags)
    names.update(t for p in policies for t in p.exact_tables)
    rows = []
    for table in sorted(names):
        state = records.states.get(table)
        uuid = records.policy_tables.get(table) or (state.table_uuid if state else "")
        policy = policy_for_table(policies, table)
        evaluation = unattached(table, uuid, source) if policy is None else evaluate(table, uuid, policy, state, now)
        lags = records.lags.get(table, {})
        names_of_indexes = indexes.get(table, []) + sorted(set(lags) - set(indexes.get(table, [])))
        rows.append(TableStatus(table, evaluation, state, [IndexStatus(n, lags.get(n)) for n in names_of_indexes]))
    return rows
