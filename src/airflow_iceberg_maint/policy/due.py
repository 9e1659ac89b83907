"""Trigger evaluation (docs/design.md, "Trigger evaluation"): is a table due for orphan-file removal, for
snapshot expiry, or for data compaction?

Trigger: days since the last run of the policy's kind (the last cleanup for orphan removal,
the last expiry for snapshot expiry, the last real rewrite-data-files run for compaction)
``>= minIntervalDays``; score: the days since. A table
never run is due with the highest score. Days are exact fractions of 24 hours, so a table
cleaned 6.9 days ago is not due under a 7-day interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.policy.policies import (
    DATA_COMPACTION,
    DEFAULT_MIN_INTERVAL_DAYS,
    ORPHAN_FILE_REMOVAL,
    SNAPSHOT_EXPIRY,
    Policy,
    governing_policies,
    policy_for_table,
)
from airflow_iceberg_maint.policy.state import CleanupState, StateStore

#: Score of a table never cleaned: above any real "days since" (JSON has no infinity).
NEVER_CLEANED_SCORE = 1_000_000.0

_SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class _Words:
    done: str  # "last cleaned 8 days ago"
    run: str  # "last cleanup at ... is in the future"
    policy: str  # "no orphan-removal policy in ... attaches"


#: How a reason names each kind's run; the orphan wording is the one `due` has always printed.
_WORDS = {
    ORPHAN_FILE_REMOVAL: _Words("cleaned", "cleanup", "orphan-removal"),
    SNAPSHOT_EXPIRY: _Words("expired", "expiry", "snapshot-expiry"),
    DATA_COMPACTION: _Words("compacted", "compaction", "data-compaction"),
}


@dataclass(frozen=True)
class Evaluation:
    table: str
    table_uuid: str
    policy: str | None
    last_cleanup_at: datetime | None
    days_since_last_cleanup: float | None
    min_interval_days: float
    due: bool
    score: float
    reason: str
    type: str = ORPHAN_FILE_REMOVAL

    def policy_json(self) -> dict[str, Any]:
        """One entry of ``due --json``'s ``policies``: the same evaluation, named for any kind."""
        return {
            "policy": self.policy,
            "type": self.type,
            "due": self.due,
            "last_run_at": self.last_cleanup_at.isoformat() if self.last_cleanup_at else None,
            "days_since_last_run": self.days_since_last_cleanup,
            "min_interval_days": self.min_interval_days,
            "reason": self.reason,
            "score": self.score,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "table_uuid": self.table_uuid,
            "policy": self.policy,
            "last_cleanup_at": self.last_cleanup_at.isoformat() if self.last_cleanup_at else None,
            "days_since_last_cleanup": self.days_since_last_cleanup,
            "min_interval_days": self.min_interval_days,
            "due": self.due,
            "score": self.score,
            "reason": self.reason,
        }


def _days(value: float) -> str:
    return f"{value:g} day" + ("" if value == 1 else "s")


def evaluate(
    table: str,
    table_uuid: str,
    policy: Policy[Any] | None,
    state: CleanupState | None,
    now: datetime,
) -> Evaluation:
    """Evaluate one table against its policy (or orphan removal's default interval when ``policy`` is None).

    ``state`` is the table's record for the policy's type.
    """
    if now.tzinfo is None:
        raise InvalidInputError(f"evaluation time {now!r}: must be timezone-aware")
    interval = policy.min_interval_days if policy else DEFAULT_MIN_INTERVAL_DAYS
    kind = policy.type if policy else ORPHAN_FILE_REMOVAL
    words = _WORDS[kind]
    last = state.last_success_at if state else None
    days = None if last is None else (now - last).total_seconds() / _SECONDS_PER_DAY

    def result(due: bool, score: float, reason: str) -> Evaluation:
        name = policy.name if policy else None
        return Evaluation(table, table_uuid, name, last, days, interval, due, score, reason, kind)

    if policy is not None and not policy.enabled:
        return result(False, 0.0, f"policy {policy.name!r} is disabled")
    if last is None or days is None:
        return result(True, NEVER_CLEANED_SCORE, f"never {words.done}: due")
    if days < 0:
        # A clock stepped back, or state written by a host ahead of ours: wait rather than guess.
        return result(False, 0.0, f"last {words.run} at {last.isoformat()} is in the future: not due")
    since = f"last {words.done} {_days(round(days, 2))} ago, interval {_days(interval)}"
    return result(days >= interval, days, f"{since}: due" if days >= interval else f"{since}: not due")


def unattached(table: str, table_uuid: str, source: str, policy_type: str = ORPHAN_FILE_REMOVAL) -> Evaluation:
    """The result for a table that no policy of the type in ``source`` attaches to: never due."""
    return Evaluation(
        table=table,
        table_uuid=table_uuid,
        policy=None,
        last_cleanup_at=None,
        days_since_last_cleanup=None,
        min_interval_days=DEFAULT_MIN_INTERVAL_DAYS,
        due=False,
        score=0.0,
        reason=f"no {_WORDS[policy_type].policy} policy in {source} attaches to {table}: not due",
        type=policy_type,
    )


def evaluate_table(
    table: str,
    table_uuid: str,
    policies: Sequence[Policy[Any]] | None,
    store: StateStore,
    now: datetime,
    source: str = "the policies",
    policy_type: str = ORPHAN_FILE_REMOVAL,
) -> Evaluation:
    """Find the table's policy of the type (None: no policies given, default interval) and evaluate it."""
    policy = policy_for_table(policies, table, policy_type) if policies is not None else None
    if policies is not None and policy is None:
        return unattached(table, table_uuid, source, policy_type)
    return evaluate(table, table_uuid, policy, store.get(table_uuid, policy_type), now)


def evaluate_policies(
    table: str, table_uuid: str, policies: Sequence[Policy[Any]], store: StateStore, now: datetime
) -> list[Evaluation]:
    """Evaluate each policy that governs the table, one per type, each against its own kind's state."""
    return [
        evaluate(table, table_uuid, policy, store.get(table_uuid, policy.type), now)
        for policy in governing_policies(policies, table)
    ]
