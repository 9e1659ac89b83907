"""Reference sources: how other parts of the project keep their own files from the orphan run (S1).

The orphan engine owns this protocol; the index package implements it. Callers pass every
source to ``remove_orphan_files``; the argument has no default, so a caller cannot forget one
without saying so (an empty tuple).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from pyiceberg.table import Table

from airflow_iceberg_maint.errors import MetadataReadError


class ReferenceSource(Protocol):
    """Files kept under a table's location that no Iceberg metadata names."""

    @property
    def name(self) -> str:
        """Shown in errors: which source failed (read only: a frozen dataclass or a constant will do)."""
        ...

    def path_batches(self, table: Table) -> Iterable[list[str]]:
        """Every path the source needs, in batches; raise when they cannot all be read (S2)."""
        ...


def source_path_batches(table: Table, sources: Sequence[ReferenceSource]) -> Iterator[list[str]]:
    """Paths from every source; any failure aborts the run (S2)."""
    for source in sources:
        try:
            yield from source.path_batches(table)
        except MetadataReadError:
            raise
        except Exception as exc:
            raise MetadataReadError(f"reference source {source.name!r}: failed ({exc})") from exc
