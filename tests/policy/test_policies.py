"""Policy model and loading: defaults, attachment, and errors that name the bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from airflow_iceberg_maint.errors import InvalidInputError, TableNotFoundError
from airflow_iceberg_maint.policy.policies import (
    ORPHAN_FILE_REMOVAL,
    SNAPSHOT_EXPIRY,
    OrphanRemovalContent,
    SnapshotExpiryContent,
    attached_tables,
    governing_policies,
    load_policies,
    parse_policies,
    parse_policy,
    policy_for_table,
)

SPEC_EXAMPLE = {
    "name": "remove_orphans_weekly",
    "type": "system_iceberg_orphan_file_removal",
    "comment": "Remove orphan files older than 3 days",
    "enabled": True,
    "content": {"olderThanDays": 3, "dryRun": False},
}


def test_spec_example_with_defaults() -> None:
    policy = parse_policy(SPEC_EXAMPLE)
    assert policy.name == "remove_orphans_weekly"
    assert policy.type == ORPHAN_FILE_REMOVAL
    assert policy.content == OrphanRemovalContent(older_than_days=3.0, location=None, dry_run=False)
    assert policy.min_interval_days == 7.0
    assert policy.tables == ()
    assert policy.enabled is True


def test_content_defaults_when_content_is_empty() -> None:
    policy = parse_policy({"name": "p", "type": ORPHAN_FILE_REMOVAL, "content": {}})
    assert policy.content == OrphanRemovalContent(3.0, None, False)


def test_zero_interval_is_allowed_and_zero_days_needs_allow_recent_files() -> None:
    policy = parse_policy(
        {
            "name": "p",
            "type": ORPHAN_FILE_REMOVAL,
            "minIntervalDays": 0,
            "content": {"olderThanDays": 0, "allowRecentFiles": True},
        }
    )
    assert policy.min_interval_days == 0.0
    assert policy.content == OrphanRemovalContent(0.0, None, False, allow_recent_files=True)
    assert policy.content.to_json() == {
        "olderThanDays": 0.0,
        "location": None,
        "dryRun": False,
        "allowRecentFiles": True,
    }
    assert parse_policy(
        {"name": "p", "type": ORPHAN_FILE_REMOVAL, "content": {"olderThanDays": 1}}
    ).content.to_json() == {"olderThanDays": 1.0, "location": None, "dryRun": False}


def test_listing_is_carried_and_shown_only_when_set() -> None:
    source = "s3://inventory/wh/daily/2026-12-01T00-00Z/manifest.json"
    policy = parse_policy({"name": "p", "type": ORPHAN_FILE_REMOVAL, "content": {"listing": source}})
    assert policy.content.listing == source
    assert policy.content.to_json() == {"olderThanDays": 3.0, "location": None, "dryRun": False, "listing": source}


def test_memory_budget_is_carried_and_shown_only_when_set() -> None:
    policy = parse_policy({"name": "p", "type": ORPHAN_FILE_REMOVAL, "content": {"memoryBudgetMb": 64}})
    assert policy.content.memory_budget_mb == 64
    assert policy.content.to_json() == {"olderThanDays": 3.0, "location": None, "dryRun": False, "memoryBudgetMb": 64}
    assert parse_policy({"name": "p", "type": ORPHAN_FILE_REMOVAL}).content.memory_budget_mb is None
    with pytest.raises(InvalidInputError) as caught:  # an orphan-removal key only
        parse_policy({"name": "p", "type": SNAPSHOT_EXPIRY, "content": {"memoryBudgetMb": 64}}, source="p.yaml")
    assert str(caught.value) == (
        "p.yaml: policy 'p' content: unknown field 'memoryBudgetMb' (allowed: dryRun, olderThanDays, retainLast)"
    )


@pytest.mark.parametrize(("days", "shown"), [(0, "0"), (0.5, "0.5"), (0.999, "0.999")])
def test_days_under_one_are_refused_without_allow_recent_files(days: float, shown: str) -> None:
    for content in ({"olderThanDays": days}, {"olderThanDays": days, "allowRecentFiles": False}):
        with pytest.raises(InvalidInputError) as caught:
            parse_policy({"name": "p", "type": ORPHAN_FILE_REMOVAL, "content": content}, "f.yaml")
        assert str(caught.value) == (
            f"f.yaml: policy 'p' content.olderThanDays: expected a number of days >= 1, got {shown} (files younger "
            "than 1 day may belong to writes in progress; set content.allowRecentFiles: true to allow down to 0)"
        )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**SPEC_EXAMPLE, "type": "system_iceberg_compaction"}, "unknown policy type 'system_iceberg_compaction'"),
        ({**SPEC_EXAMPLE, "schedule": "daily"}, "unknown field 'schedule'"),
        ({**SPEC_EXAMPLE, "content": {"olderThanDays": 3, "retainLast": 2}}, "unknown field 'retainLast'"),
        ({**SPEC_EXAMPLE, "content": {"olderThanDays": -1}}, "content.olderThanDays: must be a finite number >= 0"),
        ({**SPEC_EXAMPLE, "content": {"olderThanDays": "3"}}, "content.olderThanDays: expected a number, got '3'"),
        ({**SPEC_EXAMPLE, "content": {"olderThanDays": True}}, "content.olderThanDays: expected a number"),
        ({**SPEC_EXAMPLE, "content": {"dryRun": "yes"}}, "content.dryRun: expected true or false"),
        (
            {**SPEC_EXAMPLE, "content": {"olderThanDays": 2, "allowRecentFiles": "yes"}},
            "content.allowRecentFiles: expected true or false, got 'yes'",
        ),
        (
            {**SPEC_EXAMPLE, "content": {"olderThanDays": -1, "allowRecentFiles": True}},
            "content.olderThanDays: must be a finite number >= 0",
        ),
        ({**SPEC_EXAMPLE, "content": {"location": 7}}, "content.location: expected a string"),
        ({**SPEC_EXAMPLE, "content": {"location": " "}}, "content.location: must not be empty"),
        ({**SPEC_EXAMPLE, "content": {"listing": ["a"]}}, "content.listing: expected a string, got ['a']"),
        ({**SPEC_EXAMPLE, "content": {"listing": ""}}, "content.listing: must not be empty (omit it to list storage)"),
        (
            {**SPEC_EXAMPLE, "content": {"memoryBudgetMb": 0}},
            "content.memoryBudgetMb: expected a whole number >= 1, got 0",
        ),
        (
            {**SPEC_EXAMPLE, "content": {"memoryBudgetMb": 256.0}},
            "content.memoryBudgetMb: expected a whole number >= 1, got 256.0",
        ),
        (
            {**SPEC_EXAMPLE, "content": {"memoryBudgetMb": "512"}},
            "content.memoryBudgetMb: expected a whole number >= 1, got '512'",
        ),
        (
            {**SPEC_EXAMPLE, "content": {"memoryBudgetMb": True}},
            "content.memoryBudgetMb: expected a whole number >= 1, got True",
        ),
        ({**SPEC_EXAMPLE, "minIntervalDays": -0.5}, "minIntervalDays: must be a finite number >= 0"),
        ({**SPEC_EXAMPLE, "enabled": "true"}, ".enabled: expected true or false"),
        ({**SPEC_EXAMPLE, "tables": "sales.*"}, ".tables: expected a list"),
        ({**SPEC_EXAMPLE, "tables": ["orders"]}, "'orders' is not 'namespace.table'"),
        ({**SPEC_EXAMPLE, "content": [1]}, "content must be an object"),
        ({**SPEC_EXAMPLE, "name": ""}, ".name: expected a non-empty string"),
    ],
)
def test_bad_policies_are_refused_naming_the_input(body: dict, message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_policy(body, source="policies.yaml")
    assert message in str(caught.value)
    assert "policies.yaml" in str(caught.value)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="'remove_orphans_weekly' is used twice"):
        parse_policies([SPEC_EXAMPLE, SPEC_EXAMPLE])


def test_attachment_exact_beats_glob_then_file_order() -> None:
    policies = parse_policies(
        [
            {**SPEC_EXAMPLE, "name": "all_sales", "tables": ["sales.*"]},
            {**SPEC_EXAMPLE, "name": "orders_only", "tables": ["sales.orders"], "enabled": False},
            {**SPEC_EXAMPLE, "name": "second_glob", "tables": ["sales.o*"]},
        ]
    )
    assert policy_for_table(policies, "sales.orders").name == "orders_only"
    assert policy_for_table(policies, "sales.other").name == "all_sales"
    assert policy_for_table(policies, "hr.people") is None
    assert policies[0].exact_tables == ()
    assert policies[1].exact_tables == ("sales.orders",)


def test_glob_does_not_cross_case() -> None:
    policy = parse_policy({**SPEC_EXAMPLE, "tables": ["sales.*"]})
    assert policy.attaches("sales.orders")
    assert not policy.attaches("Sales.orders")
    assert not policy.attaches("salesx.orders")


def test_load_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "policies.yaml"
    yaml_file.write_text(
        "- name: weekly\n"
        "  type: system_iceberg_orphan_file_removal\n"
        "  minIntervalDays: 7\n"
        "  tables: ['sales.*', 'hr.people']\n"
        "  content: {olderThanDays: 5, location: 'file:///w/sales/orders/data', dryRun: true}\n"
    )
    json_file = tmp_path / "policy.json"
    json_file.write_text(json.dumps(SPEC_EXAMPLE))
    [weekly] = load_policies(yaml_file)
    assert weekly.tables == ("sales.*", "hr.people")
    assert weekly.content == OrphanRemovalContent(5.0, "file:///w/sales/orders/data", True)
    [example] = load_policies(json_file)
    assert example.name == "remove_orphans_weekly"


def test_unreadable_and_malformed_files_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InvalidInputError, match=r"nope.yaml.*cannot be read"):
        load_policies(missing)
    broken = tmp_path / "broken.json"
    broken.write_text('{"name": ')
    with pytest.raises(InvalidInputError, match=r"broken.json.*not valid .json"):
        load_policies(broken)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(InvalidInputError, match=r"empty.yaml.*is empty"):
        load_policies(empty)


def test_round_trip_through_json() -> None:
    policy = parse_policy({**SPEC_EXAMPLE, "tables": ["a.b"], "minIntervalDays": 2})
    assert parse_policy(policy.to_json()) == policy


def test_attached_tables_resolves_globs_and_exact_names(sqlite_catalog: SqlCatalog) -> None:
    schema = pa.schema([("id", pa.int64())])
    for namespace in ("sales", "hr"):
        sqlite_catalog.create_namespace(namespace)
    for name in ("sales.orders", "sales.events_raw", "hr.people", "hr.events_hr", "db.events_x"):
        sqlite_catalog.create_table(name, schema)
    policies = parse_policies(
        [
            {**SPEC_EXAMPLE, "name": "a", "tables": ["sales.*", "hr.people"]},
            {**SPEC_EXAMPLE, "name": "b", "tables": ["*.events_*"]},
            {**SPEC_EXAMPLE, "name": "off", "enabled": False, "tables": ["db.*"]},
            {**SPEC_EXAMPLE, "name": "none", "tables": ["nowhere.*"]},
        ]
    )
    assert attached_tables(sqlite_catalog, policies) == [
        "db.events_x",
        "hr.events_hr",
        "hr.people",
        "sales.events_raw",
        "sales.orders",
    ]
    missing = parse_policies([{**SPEC_EXAMPLE, "name": "m", "tables": ["sales.gone"]}])
    with pytest.raises(TableNotFoundError, match=r"policy 'm' attaches table 'sales\.gone'"):
        attached_tables(sqlite_catalog, missing)


EXPIRY_EXAMPLE = {
    "name": "expire_daily",
    "type": "system_iceberg_snapshot_expiry",
    "enabled": True,
    "minIntervalDays": 1,
    "tables": ["sales.*"],
    "content": {"olderThanDays": 5, "retainLast": 1, "dryRun": False},
}


def test_expiry_policy_of_the_contract() -> None:
    policy = parse_policy(EXPIRY_EXAMPLE)
    assert policy.type == SNAPSHOT_EXPIRY
    assert policy.content == SnapshotExpiryContent(older_than_days=5.0, retain_last=1, dry_run=False)
    assert policy.min_interval_days == 1.0 and policy.tables == ("sales.*",)
    assert policy.attaches("sales.orders") and not policy.attaches("hr.people")
    assert policy.to_json() == {
        "name": "expire_daily",
        "type": "system_iceberg_snapshot_expiry",
        "comment": None,
        "enabled": True,
        "minIntervalDays": 1.0,
        "tables": ["sales.*"],
        "content": {"olderThanDays": 5.0, "retainLast": 1, "dryRun": False},
    }
    assert parse_policy(policy.to_json()) == policy


def test_expiry_content_defaults_to_the_table_properties() -> None:
    policy = parse_policy({"name": "e", "type": SNAPSHOT_EXPIRY})
    assert policy.content == SnapshotExpiryContent(older_than_days=None, retain_last=None, dry_run=False)
    assert policy.content.to_json() == {"olderThanDays": None, "retainLast": None, "dryRun": False}
    assert policy.min_interval_days == 7.0


def test_expiry_days_under_one_need_no_opt_in() -> None:
    content = parse_policy({**EXPIRY_EXAMPLE, "content": {"olderThanDays": 0}}).content
    assert content == SnapshotExpiryContent(older_than_days=0.0)


WHERE = "policies.yaml: policy 'expire_daily'"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"olderThanDays": -1}, f"{WHERE} content.olderThanDays: must be a finite number >= 0, got -1"),
        ({"olderThanDays": "5"}, f"{WHERE} content.olderThanDays: expected a number, got '5'"),
        ({"olderThanDays": True}, f"{WHERE} content.olderThanDays: expected a number, got True"),
        ({"retainLast": 0}, f"{WHERE} content.retainLast: expected a whole number >= 1, got 0"),
        ({"retainLast": 1.5}, f"{WHERE} content.retainLast: expected a whole number >= 1, got 1.5"),
        ({"retainLast": 2.0}, f"{WHERE} content.retainLast: expected a whole number >= 1, got 2.0"),
        ({"retainLast": True}, f"{WHERE} content.retainLast: expected a whole number >= 1, got True"),
        ({"retainLast": "1"}, f"{WHERE} content.retainLast: expected a whole number >= 1, got '1'"),
        ({"dryRun": "no"}, f"{WHERE} content.dryRun: expected true or false, got 'no'"),
        (
            {"location": "file:///w"},
            f"{WHERE} content: unknown field 'location' (allowed: dryRun, olderThanDays, retainLast)",
        ),
        (
            {"allowRecentFiles": True},
            f"{WHERE} content: unknown field 'allowRecentFiles' (allowed: dryRun, olderThanDays, retainLast)",
        ),
        ("5 days", f"{WHERE}: content must be an object, got '5 days'"),
    ],
)
def test_bad_expiry_content_is_refused_naming_the_field(content: object, message: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_policy({**EXPIRY_EXAMPLE, "content": content}, source="policies.yaml")
    assert str(caught.value) == message


def test_unknown_type_lists_both_known_types() -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_policy({**EXPIRY_EXAMPLE, "type": "system_iceberg_compaction"}, source="f.json")
    assert str(caught.value) == (
        "f.json: policy 'expire_daily'.type: unknown policy type 'system_iceberg_compaction' "
        "(known: system_iceberg_data_compaction, system_iceberg_orphan_file_removal, system_iceberg_snapshot_expiry)"
    )


def test_names_are_unique_across_types() -> None:
    with pytest.raises(InvalidInputError) as caught:
        parse_policies([EXPIRY_EXAMPLE, {**SPEC_EXAMPLE, "name": "expire_daily"}], source="f.json")
    assert str(caught.value) == "f.json: policy name 'expire_daily' is used twice"


def test_each_type_governs_on_its_own() -> None:
    policies = parse_policies(
        [
            {**SPEC_EXAMPLE, "name": "orphans_sales", "tables": ["sales.*"]},
            {**EXPIRY_EXAMPLE, "name": "expire_sales", "tables": ["sales.*"]},
            {**EXPIRY_EXAMPLE, "name": "expire_orders", "tables": ["sales.orders"]},
            {**EXPIRY_EXAMPLE, "name": "expire_hr", "tables": ["hr.*"]},
        ]
    )
    assert policy_for_table(policies, "sales.orders").name == "orphans_sales"
    assert policy_for_table(policies, "sales.orders", SNAPSHOT_EXPIRY).name == "expire_orders"
    assert [p.name for p in governing_policies(policies, "sales.orders")] == ["orphans_sales", "expire_orders"]
    assert [p.name for p in governing_policies(policies, "sales.items")] == ["orphans_sales", "expire_sales"]
    assert [p.name for p in governing_policies(policies, "hr.people")] == ["expire_hr"]
    assert governing_policies(policies, "ops.logs") == []


def test_attached_tables_by_type(sqlite_catalog: SqlCatalog) -> None:
    sqlite_catalog.create_namespace("sales")
    for name in ("sales.orders", "sales.items"):
        sqlite_catalog.create_table(name, pa.schema([("id", pa.int64())]))
    policies = parse_policies(
        [
            {**SPEC_EXAMPLE, "name": "orphans", "tables": ["sales.orders"]},
            {**EXPIRY_EXAMPLE, "name": "expire", "tables": ["sales.*"]},
        ]
    )
    assert attached_tables(sqlite_catalog, policies) == ["sales.orders"]
    assert attached_tables(sqlite_catalog, policies, SNAPSHOT_EXPIRY) == ["sales.items", "sales.orders"]
