"""Maintenance policies: what to run on which tables, declared as configuration.

Three policy types are built in: orphan-file removal, snapshot expiry and data compaction. A policy has the
body shape of docs/design.md (section "Policy") plus two
top-level fields shared by every policy type: ``minIntervalDays`` (the minimum interval
between runs) and ``tables`` (exact names or globs the policy attaches to). Policies load
from JSON or YAML; every unknown field, wrong type or negative number is refused with an
error naming it (S7).

Policies drive unattended runs, so their ``olderThanDays`` has the floor of Iceberg's Spark
procedure, 1 day: files younger than that may belong to a write still in progress. A smaller
value is refused when the policy is validated, unless the content opts in with
``allowRecentFiles: true``. The command line's own ``--older-than-days`` has no such floor.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from airflow_iceberg_maint.catalog import parse_identifier
from airflow_iceberg_maint.errors import InvalidInputError, TableNotFoundError
from airflow_iceberg_maint.health.expressions import BOOLEAN, NUMBER, Expression, parse
from airflow_iceberg_maint.health.names import EXPRESSION_NAMES
from airflow_iceberg_maint.reachability.cutoff import DEFAULT_OLDER_THAN_DAYS
from airflow_iceberg_maint.state.jobs import DATA_COMPACTION as DATA_COMPACTION
from airflow_iceberg_maint.state.jobs import ORPHAN_FILE_REMOVAL as ORPHAN_FILE_REMOVAL
from airflow_iceberg_maint.state.jobs import SNAPSHOT_EXPIRY as SNAPSHOT_EXPIRY

#: The strategies a compaction policy may name: z-order needs columns, which a policy does not name.
COMPACTION_STRATEGIES = ("binpack", "sort")
DEFAULT_MIN_INTERVAL_DAYS = 7.0
#: Smallest ``olderThanDays`` an unattended run accepts without ``allowRecentFiles`` (Spark's floor).
RECENT_FILES_FLOOR_DAYS = 1.0

_POLICY_FIELDS = frozenset(
    {"name", "type", "comment", "enabled", "minIntervalDays", "tables", "content", "trigger", "score"}
)
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class OrphanRemovalContent:
    """Content of a ``system_iceberg_orphan_file_removal`` policy."""

    older_than_days: float = DEFAULT_OLDER_THAN_DAYS
    location: str | None = None
    dry_run: bool = False
    allow_recent_files: bool = False
    listing: str | None = None  # an inventory to read the listing from (orphans.inventory); None: list storage
    memory_budget_mb: int | None = None  # the scan's memory before it spills to disk; None: the engine's default

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "olderThanDays": self.older_than_days,
            "location": self.location,
            "dryRun": self.dry_run,
        }
        # Shown only when set, so the output for every policy that does not opt in stays as it was.
        if self.allow_recent_files:
            body["allowRecentFiles"] = True
        if self.listing is not None:
            body["listing"] = self.listing
        if self.memory_budget_mb is not None:
            body["memoryBudgetMb"] = self.memory_budget_mb
        return body


@dataclass(frozen=True)
class SnapshotExpiryContent:
    """Content of a ``system_iceberg_snapshot_expiry`` policy; None: the table's ``history.expire.*`` default."""

    older_than_days: float | None = None
    retain_last: int | None = None
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"olderThanDays": self.older_than_days, "retainLast": self.retain_last, "dryRun": self.dry_run}


@dataclass(frozen=True)
class DataCompactionContent:
    """Content of a ``system_iceberg_data_compaction`` policy; None: the table's property, else the engine's default."""

    target_file_size_mb: float | None = None
    min_input_files: int | None = None
    strategy: str = "binpack"
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "targetFileSizeMb": self.target_file_size_mb,
            "minInputFiles": self.min_input_files,
            "strategy": self.strategy,
            "dryRun": self.dry_run,
        }


PolicyContent = OrphanRemovalContent | SnapshotExpiryContent | DataCompactionContent
ContentT = TypeVar("ContentT", bound=PolicyContent)


@dataclass(frozen=True)
class Policy(Generic[ContentT]):
    """A policy; ``Policy[SnapshotExpiryContent]`` when its type is known. A bare ``Policy`` is any type."""

    name: str
    type: str
    content: ContentT
    comment: str | None = None
    enabled: bool = True
    min_interval_days: float = DEFAULT_MIN_INTERVAL_DAYS
    tables: tuple[str, ...] = field(default_factory=tuple)
    #: Due only when this holds (besides the minimum interval); None: the clock rule alone (docs/health.md).
    trigger: Expression | None = None
    #: Orders the due tables, highest first; None: the days since the last run.
    score: Expression | None = None

    def attaches_exactly(self, table: str) -> bool:
        return table in self.tables

    def attaches(self, table: str) -> bool:
        """Whether a table name matches one of the policy's exact names or globs."""
        return any(fnmatch.fnmatchcase(table, pattern) for pattern in self.tables)

    @property
    def exact_tables(self) -> tuple[str, ...]:
        """The attached names that are not globs: each must exist in the catalog."""
        return tuple(t for t in self.tables if not _GLOB_CHARS & set(t))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "comment": self.comment,
            "enabled": self.enabled,
            "minIntervalDays": self.min_interval_days,
            "tables": list(self.tables),
            "content": self.content.to_json(),
            # Shown only when set, so the output for every policy without them stays as it was.
            **({"trigger": self.trigger.text} if self.trigger else {}),
            **({"score": self.score.text} if self.score else {}),
        }


def _where(source: str, index: int | None, name: str | None) -> str:
    if name:
        return f"{source}: policy {name!r}"
    return f"{source}: policy #{index}" if index is not None else f"{source}: policy"


def _number(value: Any, what: str) -> float:
    # bool is an int subclass in Python; a policy saying `olderThanDays: true` is a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"{what}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{what}: must be a finite number >= 0, got {value!r}")
    return float(value)


def _boolean(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(f"{what}: expected true or false, got {value!r}")
    return value


def _optional_string(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{what}: expected a string, got {value!r}")
    return value


def _unknown_fields(body: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInputError(f"{what}: unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _content_body(body: Any, allowed: frozenset[str], what: str) -> Mapping[str, Any]:
    """A policy's ``content`` object (absent: empty) with only ``allowed`` fields."""
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise InvalidInputError(f"{what}: content must be an object, got {body!r}")
    _unknown_fields(body, allowed, f"{what} content")
    return body


def parse_orphan_removal_content(body: Any, what: str) -> OrphanRemovalContent:
    """Parse and validate the content of an orphan-file removal policy."""
    allowed = frozenset({"olderThanDays", "location", "dryRun", "allowRecentFiles", "listing", "memoryBudgetMb"})
    body = _content_body(body, allowed, what)
    location = _optional_string(body.get("location"), f"{what} content.location")
    if location is not None and not location.strip():
        raise InvalidInputError(f"{what} content.location: must not be empty (omit it to scan the table location)")
    listing = _optional_string(body.get("listing"), f"{what} content.listing")
    if listing is not None and not listing.strip():
        raise InvalidInputError(f"{what} content.listing: must not be empty (omit it to list storage)")
    days = _number(body.get("olderThanDays", DEFAULT_OLDER_THAN_DAYS), f"{what} content.olderThanDays")
    allow_recent_files = _boolean(body.get("allowRecentFiles", False), f"{what} content.allowRecentFiles")
    if days < RECENT_FILES_FLOOR_DAYS and not allow_recent_files:
        raise InvalidInputError(
            f"{what} content.olderThanDays: expected a number of days >= 1, got {days:g} (files younger than "
            "1 day may belong to writes in progress; set content.allowRecentFiles: true to allow down to 0)"
        )
    budget = body.get("memoryBudgetMb")
    return OrphanRemovalContent(
        older_than_days=days,
        location=location,
        dry_run=_boolean(body.get("dryRun", False), f"{what} content.dryRun"),
        allow_recent_files=allow_recent_files,
        listing=listing,
        memory_budget_mb=None if budget is None else _whole_number(budget, f"{what} content.memoryBudgetMb", 1),
    )


def _whole_number(value: Any, what: str, minimum: int) -> int:
    # 2.0 is refused too: a count written as a decimal is more likely a slip than intent.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what}: expected a whole number >= {minimum}, got {value!r}")
    return value


def parse_snapshot_expiry_content(body: Any, what: str) -> SnapshotExpiryContent:
    """Parse and validate the content of a snapshot-expiry policy.

    ``olderThanDays`` has no 1-day floor: expiry reads manifests, never lists storage, so a write
    in progress cannot lose its files to it; a small value only shortens time travel.
    """
    body = _content_body(body, frozenset({"olderThanDays", "retainLast", "dryRun"}), what)
    days = body.get("olderThanDays")
    retain_last = body.get("retainLast")
    return SnapshotExpiryContent(
        older_than_days=None if days is None else _number(days, f"{what} content.olderThanDays"),
        retain_last=None if retain_last is None else _whole_number(retain_last, f"{what} content.retainLast", 1),
        dry_run=_boolean(body.get("dryRun", False), f"{what} content.dryRun"),
    )


def parse_data_compaction_content(body: Any, what: str) -> DataCompactionContent:
    """Parse and validate the content of a data-compaction policy."""
    body = _content_body(body, frozenset({"targetFileSizeMb", "minInputFiles", "strategy", "dryRun"}), what)
    size, files = body.get("targetFileSizeMb"), body.get("minInputFiles")
    if size is not None and _number(size, f"{what} content.targetFileSizeMb") == 0:
        raise InvalidInputError(f"{what} content.targetFileSizeMb: expected a number of MB > 0, got {size!r}")
    strategy = body.get("strategy", "binpack")
    if strategy not in COMPACTION_STRATEGIES:
        raise InvalidInputError(
            f"{what} content.strategy: expected one of {', '.join(COMPACTION_STRATEGIES)} (sort: the table's sort "
            f"order; zorder needs columns, which only the command line and the operator take), got {strategy!r}"
        )
    return DataCompactionContent(
        target_file_size_mb=None if size is None else float(size),
        min_input_files=None if files is None else _whole_number(files, f"{what} content.minInputFiles", 1),
        strategy=strategy,
        dry_run=_boolean(body.get("dryRun", False), f"{what} content.dryRun"),
    )


#: Content parser for each known policy type; a new built-in type registers here.
CONTENT_PARSERS: Mapping[str, Callable[[Any, str], PolicyContent]] = {
    ORPHAN_FILE_REMOVAL: parse_orphan_removal_content,
    SNAPSHOT_EXPIRY: parse_snapshot_expiry_content,
    DATA_COMPACTION: parse_data_compaction_content,
}


def _tables(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInputError(f"{what}.tables: expected a list of table names or globs, got {value!r}")
    for pattern in value:
        if not isinstance(pattern, str) or "." not in pattern or pattern.startswith(".") or pattern.endswith("."):
            raise InvalidInputError(f"{what}.tables: {pattern!r} is not 'namespace.table' or a glob such as 'sales.*'")
    return tuple(value)


def parse_policy(body: Any, source: str = "policy", index: int | None = None) -> Policy[Any]:
    """Validate one policy object (REST body shape) and return it."""
    if not isinstance(body, Mapping):
        raise InvalidInputError(f"{_where(source, index, None)}: expected an object, got {body!r}")
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"{_where(source, index, None)}.name: expected a non-empty string, got {name!r}")
    what = _where(source, index, name)
    _unknown_fields(body, _POLICY_FIELDS, what)
    policy_type = body.get("type")
    if not isinstance(policy_type, str) or policy_type not in CONTENT_PARSERS:
        raise InvalidInputError(
            f"{what}.type: unknown policy type {policy_type!r} (known: {', '.join(sorted(CONTENT_PARSERS))})"
        )
    return Policy(
        name=name,
        type=policy_type,
        content=CONTENT_PARSERS[policy_type](body.get("content"), what),
        comment=_optional_string(body.get("comment"), f"{what}.comment"),
        enabled=_boolean(body.get("enabled", True), f"{what}.enabled"),
        min_interval_days=_number(body.get("minIntervalDays", DEFAULT_MIN_INTERVAL_DAYS), f"{what}.minIntervalDays"),
        tables=_tables(body.get("tables"), what),
        trigger=_expression(body.get("trigger"), f"{what}.trigger", BOOLEAN),
        score=_expression(body.get("score"), f"{what}.score", NUMBER),
    )


def _expression(text: Any, what: str, type_: str) -> Expression | None:
    return None if text is None else parse(text, EXPRESSION_NAMES, what=what, type_=type_)


def parse_policies(document: Any, source: str = "policy") -> list[Policy[Any]]:
    """Validate a document holding one policy object or a list of them; names must be unique."""
    bodies = document if isinstance(document, list) else [document]
    policies = [parse_policy(body, source, i) for i, body in enumerate(bodies)]
    seen: set[str] = set()
    for policy in policies:
        if policy.name in seen:
            raise InvalidInputError(f"{source}: policy name {policy.name!r} is used twice")
        seen.add(policy.name)
    return policies


def load_policies(path: str | Path) -> list[Policy[Any]]:
    """Load policies from a ``.json`` file, or a YAML file (any other extension)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"policy file {str(path)!r}: cannot be read ({exc.strerror or exc})") from exc
    try:
        document = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        detail = str(exc).replace("\n", " ")
        raise InvalidInputError(f"policy file {str(path)!r}: not valid {path.suffix or 'YAML'}: {detail}") from exc
    if document is None:
        raise InvalidInputError(f"policy file {str(path)!r}: is empty")
    return parse_policies(document, source=f"policy file {str(path)!r}")


def policy_for_table(
    policies: Iterable[Policy[Any]], table: str, policy_type: str = ORPHAN_FILE_REMOVAL
) -> Policy[Any] | None:
    """The policy of a type that governs a table: an exact-name attachment wins over a glob,
    otherwise the first in file order. Disabled policies count, so that evaluation can say so."""
    candidates = [p for p in policies if p.type == policy_type and p.attaches(table)]
    exact = [p for p in candidates if p.attaches_exactly(table)]
    chosen = exact or candidates
    return chosen[0] if chosen else None


def governing_policies(policies: Sequence[Policy[Any]], table: str) -> list[Policy[Any]]:
    """The policy of each type that governs a table (``policy_for_table``), types in file order."""
    types = dict.fromkeys(p.type for p in policies if p.attaches(table))
    return [policy for kind in types if (policy := policy_for_table(policies, table, kind)) is not None]


def catalog_tables(catalog: Catalog, namespace: tuple[str, ...] | None) -> list[str]:
    """Every table in one namespace, or in all namespaces (nested ones too) when ``namespace`` is None."""
    if namespace is not None:
        try:
            return [".".join(ident) for ident in catalog.list_tables(namespace)]
        except NoSuchNamespaceError:
            return []
    names: list[str] = []
    pending = [tuple(ns) for ns in catalog.list_namespaces()]
    while pending:
        ns = pending.pop()
        names += catalog_tables(catalog, ns)
        pending += [tuple(child) for child in catalog.list_namespaces(ns) if tuple(child) != ns]
    return names


def catalog_table_names(catalog: Catalog) -> list[str]:
    """Every table of the catalog, in every namespace (nested ones too), sorted."""
    return sorted(catalog_tables(catalog, None))


def attached_tables(
    catalog: Catalog, policies: Iterable[Policy[Any]], policy_type: str = ORPHAN_FILE_REMOVAL
) -> list[str]:
    """The tables that enabled policies of a type attach to, sorted.

    An exact name that is not in the catalog is an error naming it; a glob may match nothing.
    A glob with a literal namespace lists only that namespace.
    """
    wanted = [p for p in policies if p.enabled and p.type == policy_type]
    names: set[str] = set()
    listed: dict[tuple[str, ...] | None, list[str]] = {}
    for policy in wanted:
        for pattern in policy.tables:
            namespace_part = pattern.rsplit(".", 1)[0]
            if pattern in policy.exact_tables:
                if not catalog.table_exists(parse_identifier(pattern)):
                    raise TableNotFoundError(
                        f"policy {policy.name!r} attaches table {pattern!r}, which is not in catalog {catalog.name!r}"
                    )
                names.add(pattern)
                continue
            scope = None if _GLOB_CHARS & set(namespace_part) else tuple(namespace_part.split("."))
            if scope not in listed:
                listed[scope] = catalog_tables(catalog, scope)
            names.update(name for name in listed[scope] if fnmatch.fnmatchcase(name, pattern))
    return sorted(names)
