"""Trigger evaluation (docs/design.md, "Trigger evaluation"): is a table due for orphan-file removal, for
snapshot expiry, or for data compaction?

Trigger: days since the last run of the policy's kind (the last cleanup for orphan removal,
the last expiry for snapshot expiry, the last real rewrite-data-files run for compaction)
``>= minIntervalDays``; score: the days since. A table
never run is due with the highest score. Days are exact fractions of 24 hours, so a table
cleaned 6.9 days ago is not due under a 7-day interval.

A policy with a ``trigger`` expression is due when the minimum interval has passed and the
expression holds over the table's health (docs/health.md); a ``score`` expression replaces the
days as the score. Both read the table's statistics, so they need the table (``loaded=``);
without either the statistics are never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from typing import Any

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.health.names import DAYS_SINCE_LAST_RUN, NEVER_RUN_DAYS
from airflow_iceberg_maint.policy.policies import (
    DATA_COMPACTION,
    DEFAULT_MIN_INTERVAL_DAYS,
    ORPHAN_FILE_REMOVAL,
    SNAPSHOT_EXPIRY,
    Policy,
    governing_policies,
    policy_for_table,
)
from airflow_iceberg_maint.state.cleanup import CleanupState, StateStore

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
    #: The policy's trigger expression and its value (None: no trigger, or not evaluated), with the values it named.
    trigger: str | None = None
    trigger_value: bool | None = None
    trigger_values: dict[str, float] = field(default_factory=dict)

    def _trigger_json(self) -> dict[str, Any]:
        # Only with a trigger, so that `due --json` without one is exactly as before.
        if self.trigger is None:
            return {}
        return {"trigger": self.trigger, "trigger_value": self.trigger_value, "trigger_values": self.trigger_values}

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
            **self._trigger_json(),
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
            **self._trigger_json(),
        }


def _days(value: float) -> str:
    return f"{value:g} day" + ("" if value == 1 else "s")


#: The numbers a trigger or score expression names, read once when first asked for.
HealthValues = Callable[[], Mapping[str, float]]


def evaluate(
    table: str,
    table_uuid: str,
    policy: Policy[Any] | None,
    state: CleanupState | None,
    now: datetime,
    health: HealthValues | None = None,
) -> Evaluation:
    """Evaluate one table against its policy (or orphan removal's default interval when ``policy`` is None).

    ``state`` is the table's record for the policy's type; ``health`` gives the values of a policy's
    trigger and score expressions (without it they are not evaluated: the clock decides, and the reason says so).
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
        clock = result(True, NEVER_CLEANED_SCORE, f"never {words.done}: due")
    elif days < 0:
        # A clock stepped back, or state written by a host ahead of ours: wait rather than guess.
        return result(False, 0.0, f"last {words.run} at {last.isoformat()} is in the future: not due")
    else:
        since = f"last {words.done} {_days(round(days, 2))} ago, interval {_days(interval)}"
        clock = result(days >= interval, days, f"{since}: due" if days >= interval else f"{since}: not due")
    if policy is None or (policy.trigger is None and policy.score is None):
        return clock
    return _with_expressions(clock, policy, health)


def _with_expressions(clock: Evaluation, policy: Policy[Any], health: HealthValues | None) -> Evaluation:
    """The clock's verdict refined by the policy's trigger (asked only once the minimum interval has passed)
    and score. The statistics are read only when one of them is asked."""
    trigger = policy.trigger.text if policy.trigger is not None else None
    if not clock.due and policy.score is None:
        return replace(clock, trigger=trigger)
    if health is None:  # a caller that reads no statistics (the status page's rows): the clock's verdict, said so
        return replace(clock, trigger=trigger, reason=f"{clock.reason} (trigger and score not evaluated here)")
    days = clock.days_since_last_cleanup
    values = {**health(), DAYS_SINCE_LAST_RUN: NEVER_RUN_DAYS if days is None else days}
    score = float(policy.score.evaluate(values)) if policy.score is not None else clock.score
    if policy.trigger is None or not clock.due:
        return replace(clock, score=score, trigger=trigger)
    named = {name: values[name] for name in sorted(policy.trigger.names)}
    value = bool(policy.trigger.evaluate(values))
    shown = ", ".join(f"{k}={v:g}" for k, v in named.items())
    reason = f"{clock.reason.rsplit(': ', 1)[0]}; trigger {trigger!r} is {str(value).lower()}"
    reason += f" ({shown})" if shown else ""
    return replace(
        clock,
        due=value,
        score=score,
        reason=f"{reason}: {'due' if value else 'not due'}",
        trigger=trigger,
        trigger_value=value,
        trigger_values=named,
    )


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
    *,
    loaded: Table | None = None,
) -> Evaluation:
    """Find the table's policy of the type (None: no policies given, default interval) and evaluate it.

    ``loaded``: the table, whose health a trigger or score expression reads (read only then)."""
    policy = policy_for_table(policies, table, policy_type) if policies is not None else None
    if policies is not None and policy is None:
        return unattached(table, table_uuid, source, policy_type)
    health = health_values(loaded, store, now) if loaded is not None else None
    return evaluate(table, table_uuid, policy, store.get(table_uuid, policy_type), now, health)


def evaluate_policies(
    table: str,
    table_uuid: str,
    policies: Sequence[Policy[Any]],
    store: StateStore,
    now: datetime,
    *,
    loaded: Table | None = None,
) -> list[Evaluation]:
    """Evaluate each policy that governs the table, one per type, each against its own kind's state."""
    health = health_values(loaded, store, now) if loaded is not None else None
    return [
        evaluate(table, table_uuid, policy, store.get(table_uuid, policy.type), now, health)
        for policy in governing_policies(policies, table)
    ]


def health_values(table: Table, store: StateStore, now: datetime) -> HealthValues:
    """The table's health values (``names.HEALTH_NAMES``), read on the first call only."""

    @cache
    def read() -> Mapping[str, float]:
        from airflow_iceberg_maint.health.report import build_report  # imported when a policy has an expression

        uuid = str(table.metadata.table_uuid)
        return build_report(
            table,
            last_orphan_run=store.get(uuid, ORPHAN_FILE_REMOVAL),
            last_expiry=store.get(uuid, SNAPSHOT_EXPIRY),
            last_compaction=store.get(uuid, DATA_COMPACTION),
            now=now,
        ).values()

    return read
