"""Scan-location validation (S3) and path equivalence (S4)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_iceberg_maint.errors import LocationRefusedError
from airflow_iceberg_maint.fs.locations import PathEquivalence, validate_location

S3_TABLE = "s3://bucket/warehouse/db/t"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        (None, S3_TABLE),
        ("", S3_TABLE),
        (S3_TABLE, S3_TABLE),
        (S3_TABLE + "/", S3_TABLE),
        (S3_TABLE + "/data", S3_TABLE + "/data"),
        (S3_TABLE + "//data///x/", S3_TABLE + "/data/x"),
        (S3_TABLE + "/./data/../metadata", S3_TABLE + "/metadata"),
        ("s3a://bucket/warehouse/db/t/data", S3_TABLE + "/data"),
        ("S3N://bucket/warehouse/db/t/data", S3_TABLE + "/data"),
        (S3_TABLE + "/data/category=a%2Fb", S3_TABLE + "/data/category=a%2Fb"),
    ],
)
def test_accepts_the_table_location_and_paths_under_it(location, expected):
    assert validate_location(location, S3_TABLE) == expected


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("s3://bucket/warehouse/db/t_backup", "is not under the table location"),
        ("s3://bucket/warehouse/db/t/../other", "is not under the table location"),
        ("s3://bucket/warehouse/db/t/%2E%2E/other", "is not under the table location"),
        ("s3://bucket/warehouse/db/t%2F..%2F..%2Fother", "is not under the table location"),
        ("s3://bucket/warehouse/db/t/data/../../../../../..", "climbs above"),
        ("s3://bucket/", "is not under the table location"),
        ("s3://bucket", "is not under the table location"),
        ("s3://other-bucket/warehouse/db/t", "authority 'other-bucket' differs"),
        ("gs://bucket/warehouse/db/t", "scheme 'gs' differs"),
        ("/warehouse/db/t", "scheme 'file' differs"),
        ("s3://bucket/warehouse/db/t?x=1", "query, fragment or control character"),
        ("s3://bucket/warehouse/db/t/data#frag", "query, fragment or control character"),
    ],
)
def test_refuses_escapes_siblings_roots_and_other_stores(location, why):
    with pytest.raises(LocationRefusedError, match=why) as info:
        validate_location(location, S3_TABLE)
    assert repr(location) in str(info.value)  # the error names the input (S7)


def test_refuses_a_table_at_a_bucket_root():
    with pytest.raises(LocationRefusedError, match="bucket or filesystem root"):
        validate_location(None, "s3://bucket")


def test_equal_authorities_admit_an_alias():
    eq = PathEquivalence(equal_authorities={"alias": "bucket"})
    assert validate_location("s3://alias/warehouse/db/t/data", S3_TABLE, eq) == S3_TABLE + "/data"


def test_local_symlink_out_of_the_table_is_refused(tmp_path):
    table = tmp_path / "t"
    (table / "data").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, table / "data" / "link")
    os.symlink(table / "data", table / "inner-link")
    with pytest.raises(LocationRefusedError, match="resolves through a symlink"):
        validate_location(f"file://{table}/data/link", f"file://{table}")
    # A symlink that stays inside the table is refused too: listed through it, live files would
    # be spelled as no referenced path spells them (issue 9, item 1).
    with pytest.raises(LocationRefusedError, match=r"inner-link': resolves through a symlink to '.*/t/data'"):
        validate_location(f"{table}/inner-link", str(table))
    assert validate_location(f"file://{table}/data", f"file://{table}") == f"file://{table}/data"


segment = st.text(alphabet=st.sampled_from("abcXYZ09-_=%2Ee. "), min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(segment, max_size=5), st.booleans())
def test_real_sub_paths_are_always_accepted(parts, trailing):
    location = S3_TABLE + "/" + "/".join(parts) + ("/" if trailing else "")
    scan = validate_location(location, S3_TABLE)
    assert scan == S3_TABLE or scan.startswith(S3_TABLE + "/")


escape_step = st.sampled_from(["..", "%2E%2E", "%2e%2e", ".%2E", "..%2F..", "%2E%2E%2F%2E%2E"])


@given(st.lists(segment, max_size=3), st.integers(min_value=1, max_value=4), escape_step, st.lists(segment, max_size=3))
def test_escapes_are_always_refused(inside, extra_ups, up, tail):
    # Climb out of everything that was descended into, then one or more levels further.
    ups = [up] * (len(inside) + extra_ups)
    location = S3_TABLE + "/" + "/".join([*inside, *ups, "t_backup", *tail])
    with pytest.raises(LocationRefusedError):
        validate_location(location, S3_TABLE)


@given(st.sampled_from(["t_backup", "t2", "t.old", "t%2Fx"]))
def test_sibling_prefixes_are_always_refused(sibling):
    with pytest.raises(LocationRefusedError):
        validate_location(f"s3://bucket/warehouse/db/{sibling}", S3_TABLE)


def test_equivalence_rules():
    eq = PathEquivalence(equal_authorities={"nn1": "nn"})
    assert eq.equivalent("s3://b/x/y", "s3a://b/x/y")
    assert eq.equivalent("s3://b/x//y", "s3://b/x/y")
    assert eq.equivalent("hdfs://nn1/x", "hdfs://nn/x")
    assert eq.equivalent("hdfs://nn/x", "/x")  # an unqualified referenced path matches any
    assert not eq.equivalent("s3://b1/x", "s3://b2/x")
    assert eq.equivalent("s3://b/x%2Fy", "s3://b/x/y")  # percent-decoded, as a store may: kept (S4)
    assert eq.equivalent("s3://b/x/z/../y", "s3://b/x/y")  # ".." resolved
    assert PathEquivalence(equal_schemes={"gs,gcs": "gs"}).equivalent("gcs://b/x", "gs://b/x")
