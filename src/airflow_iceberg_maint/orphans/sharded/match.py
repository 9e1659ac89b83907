"""Step 3 of a sharded orphan scan (``scan.py``): one shard's range of buckets, candidates minus referenced.

A bucket is matched as a single-task scan matches its listing, within the plan's ``memory_budget_mb``:
its candidates as ``ListedRows`` (hashes in sorted runs, rows spilled past a quarter of the budget) and
its referenced paths as a ``ReferencedSet`` (sorted runs past half of it), both under the task's
local temporary directory. A bucket of any size is then bounded, whatever the number of buckets.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from airflow_iceberg_maint.orphans.listing.listed_rows import ListedRows, rows_of
from airflow_iceberg_maint.orphans.matching import match_listed
from airflow_iceberg_maint.orphans.options import DEFAULT_MEMORY_BUDGET_MB, OrphanOptions, refs_budget, rows_budget
from airflow_iceberg_maint.orphans.sharded.files import CANDIDATE_SCHEMA, BucketRange, Scratch, bucket_range
from airflow_iceberg_maint.orphans.sharded.plan import (
    UNMATCHED_SCHEMA,
    check_shard_index,
    file_infos,
    match_marker_name,
    plan_equivalence,
    plan_parts,
    read_markers,
    read_plan,
    shard_marker_name,
)
from airflow_iceberg_maint.reachability.path_hashes import HASH_SCHEMA, exact_bytes, path_hashes128
from airflow_iceberg_maint.reachability.referenced import ReferencedSet


def match_shard(scratch: str, index: int, io_properties: Mapping[str, str]) -> dict[str, int]:
    """Match shard ``index``'s contiguous range of buckets: candidates minus referenced, one bucket at a time."""
    started = time.perf_counter()
    store = Scratch(scratch, io_properties)
    plan = read_plan(store)
    check_shard_index(plan, index)
    shards = read_markers(store, plan, shard_marker_name)
    wanted = bucket_range(index, plan["shards"], plan["buckets"])
    equivalence = plan_equivalence(plan)
    # A plan written before the budget was part of it: the default.
    options = OrphanOptions(memory_budget_mb=plan["options"].get("memory_budget_mb", DEFAULT_MEMORY_BUDGET_MB))
    rows_bytes = rows_budget(options)
    unmatched: list[pa.Table] = []
    equivalent = referenced = 0
    undecodable: list[str] = []
    with tempfile.TemporaryDirectory(prefix="orphan-match-") as local:
        refs_range = BucketRange(store, HASH_SCHEMA, wanted, f"{local}/refs", plan["plan_id"])
        refs_range.fetch(plan_parts(plan, shards, "refs"))
        listed_range = BucketRange(store, CANDIDATE_SCHEMA, wanted, f"{local}/listed", plan["plan_id"])
        listed_range.fetch(plan_parts(plan, shards, "listed"))
        for bucket in wanted:
            with (
                ReferencedSet(equivalence, refs_budget(options), local) as refs,
                ListedRows(rows_bytes, local) as listed,
            ):
                for batch in refs_range.batches(bucket):
                    refs.add_hashes(batch)
                referenced += len(refs)
                for batch in listed_range.batches(bucket):
                    candidates = file_infos(batch)
                    listed.add(candidates, path_hashes128([c.path for c in candidates])[0])
                listed.finish()
                matched = match_listed(listed, refs)
            equivalent += matched.equivalent
            undecodable.extend(i.path for i in matched.undecodable)
            conflicts = pa.Table.from_batches([rows_of(matched.conflicts)])
            with matched.orphans as orphans:
                found = orphans.table()
            unmatched += [_unmatched(found, conflict=False), _unmatched(conflicts, conflict=True)]
    name = f"unmatched/{plan['plan_id']}-{index:04d}.parquet"
    rows = pa.concat_tables(unmatched) if unmatched else UNMATCHED_SCHEMA.empty_table()
    store.write_table(name, rows, plan["plan_id"])
    counts = {
        "referenced_files": referenced,
        "kept_equivalent": equivalent,
        "unmatched": sum(len(t) for t in unmatched),
    }
    store.write_json(
        match_marker_name(index),
        {
            "plan_id": plan["plan_id"],
            **counts,
            "unmatched_part": name,
            "buckets": [wanted.start, wanted.stop],
            # Names that are not UTF-8, as bytes made printable one to one, for the report.
            "kept_undecodable": [exact_bytes(p).hex() for p in undecodable],
            "seconds": round(time.perf_counter() - started, 3),
        },
    )
    return counts


def _unmatched(rows: pa.Table, *, conflict: bool) -> pa.Table:
    """Listed rows (``ROWS_SCHEMA``) as the scratch space's unmatched part."""
    flags = pa.array(np.full(rows.num_rows, conflict), pa.bool_())
    return pa.table([rows.column("path"), rows.column("size"), flags], schema=UNMATCHED_SCHEMA)
