"""The options of a data-file rewrite, with Iceberg Java's ``RewriteDataFiles`` defaults."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from airflow_iceberg_maint.errors import InvalidInputError

if TYPE_CHECKING:  # a type only: the command line's parser reads this module without pyiceberg
    from pyiceberg.table import Table

#: The policy type whose clock a real run moves (``due``).
#: The table property of rewrite-manifests' target size.
MANIFEST_TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"
TARGET_SIZE_PROPERTY = "write.target-file-size-bytes"
DEFAULT_TARGET_FILE_SIZE_BYTES = 512 * 1024 * 1024
#: A data file is rewritten when below this share of the target, or above the next one.
MIN_FILE_SIZE_RATIO = 0.75
MAX_FILE_SIZE_RATIO = 1.8
DEFAULT_MIN_INPUT_FILES = 5
#: Java's default: no number of delete files makes a file a candidate by itself.
DEFAULT_DELETE_FILE_THRESHOLD = 2**31 - 1
#: Commits of a run without ``max_commits``: each group commits on its own (partial progress).
COMMIT_ATTEMPTS = 4


class Strategy(StrEnum):
    """How the rows of a file group are laid out in the new files."""

    BINPACK = "binpack"
    SORT = "sort"
    ZORDER = "zorder"


@dataclass(frozen=True)
class RewriteOptions:
    strategy: Strategy
    target_file_size_bytes: int
    min_input_files: int
    delete_file_threshold: int
    where: str | None = None
    sort: tuple[str, ...] = ()
    zorder: tuple[str, ...] = ()
    max_commits: int | None = None
    remove_dangling_deletes: bool = True
    memory_budget_mb: int = 1024

    @property
    def min_file_bytes(self) -> int:
        return int(self.target_file_size_bytes * MIN_FILE_SIZE_RATIO)

    @property
    def max_file_bytes(self) -> int:
        return int(self.target_file_size_bytes * MAX_FILE_SIZE_RATIO)


def strategy_of(value: Strategy | str) -> Strategy:
    try:
        return Strategy(value)
    except ValueError:
        expected = ", ".join(s.value for s in Strategy)
        raise InvalidInputError(f"strategy {value!r}: expected one of {expected}") from None


def table_target_size(table: Table) -> int:
    """``write.target-file-size-bytes`` of the table, else 512 MB."""
    return size_property(table.metadata.properties, TARGET_SIZE_PROPERTY, DEFAULT_TARGET_FILE_SIZE_BYTES)


def size_property(properties: Mapping[str, str], name: str, default: int) -> int:
    """The table property ``name``, a size in bytes (a whole number >= 1); ``default`` when it is not set."""
    text = properties.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInputError(f"table property {name} {text!r}: expected a whole number of bytes >= 1")
    return value


def column_list(columns: Sequence[str] | str, what: str) -> tuple[str, ...]:
    """Column names given as a sequence or as ``"a,b"``; empty names are refused."""
    items = columns.split(",") if isinstance(columns, str) else list(columns)
    if not all(isinstance(c, str) for c in items):
        raise InvalidInputError(f"{what} {columns!r}: expected column names")
    names = tuple(c.strip() for c in items)
    if any(not n for n in names):
        raise InvalidInputError(f"{what} {columns!r}: expected comma-separated column names, e.g. a,b")
    return names


def check_strategy_columns(strategy: Strategy, sort: tuple[str, ...], zorder: tuple[str, ...]) -> None:
    if sort and strategy != Strategy.SORT:
        raise InvalidInputError(f"sort {','.join(sort)}: only with the sort strategy")
    if zorder and strategy != Strategy.ZORDER:
        raise InvalidInputError(f"zorder {','.join(zorder)}: only with the zorder strategy")
    if strategy == Strategy.ZORDER and not zorder:
        raise InvalidInputError("zorder: the zorder strategy needs the columns to interleave, e.g. zorder=['a', 'b']")
