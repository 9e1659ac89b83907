"""The lag fan-out's planning: from each defined index's measured lag, which indexes to refresh, to
rebuild sharded and to expire.

The Airflow lag plan operator measures the lags (one table load per table) and hands each table's
to ``LagPlan.add``; the plan's lists become its XComs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_maint.index.lifecycle.lag import IndexLag
from airflow_iceberg_maint.policy.index_definitions import TableDefinition
from airflow_iceberg_maint.policy.lag_threshold import CheckedLag


@dataclass
class LagPlan:
    #: ``{table, index}`` of each lagging index refreshed by one task
    lagging: list[dict[str, Any]] = field(default_factory=list)
    #: ``{table, index, shards}`` of each lagging index defined with ``shards`` > 1: rebuilt fully, sharded
    sharded: list[dict[str, Any]] = field(default_factory=list)
    #: every checked index: ``{table, ...CheckedLag.to_json()}``
    lags: list[dict[str, Any]] = field(default_factory=list)
    #: ``{table, index, retain_last}`` of every existing index, for the expiry of its extracts
    expire: list[dict[str, Any]] = field(default_factory=list)

    def add(self, definition: TableDefinition, measured: Sequence[IndexLag]) -> list[CheckedLag]:
        """Check one table's measured lags against their definitions' thresholds and plan them."""
        by_name = {index.name: index for index in definition.indexes}
        checked = [CheckedLag(lag, by_name[lag.index].threshold.exceeded(lag)) for lag in measured]
        for one in checked:
            index = by_name[one.lag.index]
            self.lags.append({"table": definition.table, **one.to_json()})
            self.expire.append({"table": definition.table, "index": index.name, "retain_last": index.retain_last})
            if one.lagging and index.shards > 1:
                self.sharded.append({"table": definition.table, "index": index.name, "shards": index.shards})
            elif one.lagging:
                self.lagging.append({"table": definition.table, "index": index.name})
        return checked
