"""A table whose live rows are also tracked in Python: the brute-force oracle for index tests.

Every change goes to the table and to ``rows`` (keyed by the unique ``rid``), and the live rows
of each snapshot are remembered, so expectations never come from the code under test. Row
positions for position deletes are found by reading the data files' ``rid`` column directly.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import In
from pyiceberg.table import Table

from tests.index.row_deletes import commit_deletion_vector, commit_equality_deletes, commit_position_deletes

SCHEMA = pa.schema(
    [
        ("rid", pa.int64()),
        ("k_int", pa.int32()),
        ("k_long", pa.int64()),
        ("k_str", pa.string()),
        ("k_date", pa.date32()),
        ("k_ts", pa.timestamp("us")),
        ("payload", pa.string()),
    ]
)
KEY_COLUMNS = ("k_int", "k_long", "k_str", "k_date", "k_ts")
POOLS: dict[str, list[Any]] = {
    "k_int": [-(2**31), -7, -1, 0, 1, 2, 3, 5, 8, 13, 21, 2**31 - 1],
    "k_long": [-(2**62), -(2**40), -3, 0, 4, 99, 2**33 + 7, 2**40, 2**62],
    "k_str": ["", "a", "ab", "abc", "abd", "b", "zz", "é", "日本", "naïve", "x" * 40],
    "k_date": [date(1969, 12, 31), date(1970, 1, 1), date(2000, 2, 29), date(2024, 1, 1), date(2024, 1, 2)],
    "k_ts": [
        datetime(1969, 12, 31, 23, 59, 59, 999999),
        datetime(1970, 1, 1),
        datetime(2024, 1, 1, 12, 30),
        datetime(2024, 1, 1, 13, 0),
        datetime(2024, 6, 30, 23, 59, 59, 1),
    ],
}
#: Values of each key column that no row ever gets.
ABSENT: dict[str, list[Any]] = {
    "k_int": [4, -8, 2**30],
    "k_long": [5, -(2**41)],
    "k_str": ["ac", "zzz", "A"],
    "k_date": [date(1999, 1, 1)],
    "k_ts": [datetime(2024, 1, 1, 12, 30, 0, 1)],
}


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[name] for name in SCHEMA.names)


def multiset(rows: Iterable[dict[str, Any]], columns: Sequence[str] | None = None) -> Counter[tuple[Any, ...]]:
    names = columns or SCHEMA.names
    return Counter(tuple(r[n] for n in names) for r in rows)


def _fullest(where: dict[int, tuple[str, int]]) -> str:
    """The data file with the most live rows (ties broken by path)."""
    live = Counter(p for p, _ in where.values())
    return min(live, key=lambda p: (-live[p], p))


@dataclass
class OracleTable:
    table: Table
    rng: random.Random
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    history: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    next_rid: int = 0

    @classmethod
    def create(cls, catalog: Catalog, name: str, seed: int, properties: dict[str, str] | None = None) -> OracleTable:
        table = catalog.create_table(f"db.{name}", schema=SCHEMA, properties=properties or {})
        return cls(table, random.Random(seed))

    def _remember(self) -> None:
        self.table = self.table.refresh()
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        self.history[snapshot.snapshot_id] = list(self.rows.values())

    @property
    def snapshot_id(self) -> int:
        snapshot = self.table.current_snapshot()
        assert snapshot is not None
        return snapshot.snapshot_id

    def _value(self, column: str) -> Any:
        return None if self.rng.random() < 0.1 else self.rng.choice(POOLS[column])

    def append(self, count: int) -> None:
        new = []
        for _ in range(count):
            row = {"rid": self.next_rid, **{c: self._value(c) for c in KEY_COLUMNS}, "payload": f"p{self.next_rid}"}
            self.next_rid += 1
            new.append(row)
        self.table.append(pa.Table.from_pylist(new, schema=SCHEMA))
        self.rows.update((r["rid"], r) for r in new)
        self._remember()

    def _locations(self) -> dict[int, tuple[str, int]]:
        """rid -> (data file, position) over the current data files, read without the index code."""
        files = self.table.inspect.files()
        paths = [p for p, c in zip(files["file_path"].to_pylist(), files["content"].to_pylist(), strict=True) if c == 0]
        where: dict[int, tuple[str, int]] = {}
        for path in paths:
            with self.table.io.new_input(path).open() as stream:
                rids = pq.read_table(stream, columns=["rid"]).column("rid").to_pylist()
            for pos, rid in enumerate(rids):
                if rid in self.rows:
                    where[rid] = (path, pos)
        return where

    def sample_rids(self, count: int) -> list[int]:
        return self.rng.sample(sorted(self.rows), min(count, len(self.rows)))

    def delete_positions(self, count: int) -> None:
        where = self._locations()
        victims = self.sample_rids(count)
        positions: dict[str, list[int]] = {}
        for rid in victims:
            path, pos = where[rid]
            positions.setdefault(path, []).append(pos)
        self.table = commit_position_deletes(self.table, positions)
        for rid in victims:
            del self.rows[rid]
        self._remember()

    def delete_with_deletion_vector(self, count: int) -> None:
        """Delete rows of the fullest data file with a deletion vector."""
        where = self._locations()
        path = _fullest(where)
        victims = self.rng.sample(sorted(rid for rid, (p, _) in where.items() if p == path), count)
        self.table = commit_deletion_vector(self.table, path, [where[rid][1] for rid in victims])
        for rid in victims:
            del self.rows[rid]
        self._remember()

    def delete_equality(self, column: str, values: Sequence[Any]) -> None:
        self.table = commit_equality_deletes(self.table, [column], [[v] for v in values])
        self.rows = {rid: r for rid, r in self.rows.items() if r[column] not in values}
        self._remember()

    def delete_copy_on_write(self, count: int) -> None:
        """Delete rows of the data file with the most live rows through pyiceberg, which rewrites that file."""
        where = self._locations()
        path = _fullest(where)
        victims = self.rng.sample(sorted(rid for rid, (p, _) in where.items() if p == path), count)
        self.table.delete(In("rid", victims))  # type: ignore[arg-type, call-arg]
        for rid in victims:
            del self.rows[rid]
        self._remember()

    def expected(self, column: str, value: Any, snapshot_id: int | None = None) -> Counter[tuple[Any, ...]]:
        rows = self.history[snapshot_id] if snapshot_id is not None else list(self.rows.values())
        return multiset(r for r in rows if r[column] == value or (value is None and r[column] is None))

    def probes(self, column: str, count: int) -> list[Any]:
        present = [r[column] for r in self.rows.values() if r[column] is not None]
        chosen = self.rng.sample(present, min(count, len(present)))
        return [*dict.fromkeys(chosen), *ABSENT[column], None]
