"""A real commit of another writer landing inside one of the project's commit calls (S18 tests).

The catalog stays real: its ``commit_table`` is wrapped on the instance so that ``change`` (itself
a commit through the same catalog) runs once, just before the wrapped call, when ``when`` holds for
the updates sent. That is after every check the project makes before a commit, so only what the
catalog refuses, or what the project finds after the commit, can save it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table


def race_into_commit(catalog: Catalog, change: Callable[[], object], when: Callable[[Sequence[Any]], bool]) -> None:
    commit = catalog.commit_table
    done: list[bool] = []

    def commit_table(table: Table, requirements: Any, updates: Any) -> Any:
        if not done and when(updates):
            done.append(True)
            change()
        return commit(table, requirements, updates)

    catalog.commit_table = commit_table  # type: ignore[method-assign]
