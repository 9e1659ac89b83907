"""Index expressions: Iceberg's transform results (bucket hashes as Java does), JSON and text forms."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import (
    Apply,
    IndexExpression,
    Reference,
    parse_expression_text,
    split_expression_list,
)

SCHEMA = Schema(
    NestedField(1, "i", IntegerType(), required=False),
    NestedField(2, "l", LongType(), required=False),
    NestedField(3, "s", StringType(), required=False),
    NestedField(4, "d", DateType(), required=False),
    NestedField(5, "ts", TimestampType(), required=False),
    NestedField(6, "tstz", TimestamptzType(), required=False),
    NestedField(7, "dec", DecimalType(9, 2), required=False),
    NestedField(8, "b", BinaryType(), required=False),
    NestedField(9, "u", UUIDType(), required=False),
    NestedField(10, "x", DoubleType(), required=False),
)
TS = dt.datetime(2017, 11, 16, 22, 31, 8)
TSTZ = dt.datetime(2017, 11, 16, 14, 31, 8, tzinfo=dt.timezone(dt.timedelta(hours=-8)))
INT_MAX = 2**31 - 1

# Iceberg's 32-bit hash of one value of each type: value -> Murmur3 hash as Iceberg Java computes it.
SPEC_HASHES: list[tuple[str, Any, int]] = [
    ("i", 34, 2017239379),
    ("l", 34, 2017239379),
    ("dec", Decimal("14.20"), -500754589),
    ("d", dt.date(2017, 11, 16), -653330422),
    ("ts", TS, -2047944441),
    ("tstz", TSTZ, -2047944441),
    ("s", "iceberg", 1210000089),
    ("b", b"\x00\x01\x02\x03", -188683207),
]


ARROW_TYPES = {
    "i": pa.int32(),
    "l": pa.int64(),
    "s": pa.string(),
    "d": pa.date32(),
    "ts": pa.timestamp("us"),
    "tstz": pa.timestamp("us", tz="UTC"),
    "dec": pa.decimal128(9, 2),
    "b": pa.binary(),
    "x": pa.float64(),
}


def column(name: str, values: list[Any]) -> pa.Table:
    return pa.table({name: pa.array(values, ARROW_TYPES[name])})


@pytest.mark.parametrize(("name", "value", "hash_value"), SPEC_HASHES, ids=[c[0] for c in SPEC_HASHES])
@pytest.mark.parametrize("buckets", [16, 1000, INT_MAX])
def test_bucket_matches_the_spec_hashes(name: str, value: Any, hash_value: int, buckets: int) -> None:
    field_id = SCHEMA.find_field(name).field_id
    expression = Apply("bucket", Reference(field_id), buckets)
    expected = (hash_value & INT_MAX) % buckets

    assert expression.evaluate(column(name, [value, None]), SCHEMA).to_pylist() == [expected, None]
    assert expression.evaluate_value(value, SCHEMA) == expected
    assert expression.result_type(SCHEMA) == IntegerType()


def test_bucket_of_uuid_matches_the_spec_hash() -> None:
    value = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
    assert Apply("bucket", Reference(9), INT_MAX).evaluate_value(value, SCHEMA) == 1488055340 & INT_MAX


@pytest.mark.parametrize(
    ("text", "values", "expected", "result_type"),
    [
        ("truncate(10, i)", [1, -1, 0, None], [0, -10, 0, None], IntegerType()),
        ("truncate(10, l)", [1, -1, 19, None], [0, -10, 10, None], LongType()),
        ("truncate(50, dec)", [Decimal("10.65"), None], [Decimal("10.50"), None], DecimalType(9, 2)),
        ("truncate(3, s)", ["iceberg", "ab", None], ["ice", "ab", None], StringType()),
        ("truncate(2, b)", [b"\x00\x01\x02", None], [b"\x00\x01", None], BinaryType()),
        ("year(ts)", [TS, None], [47, None], IntegerType()),
        ("month(ts)", [TS, None], [574, None], IntegerType()),
        ("day(ts)", [TS, None], [dt.date(2017, 11, 16), None], DateType()),
        ("hour(ts)", [TS, None], [419686, None], IntegerType()),
        ("year(d)", [dt.date(2017, 11, 16)], [47], IntegerType()),
        ("month(d)", [dt.date(2017, 11, 16)], [574], IntegerType()),
        (
            "day(d)",
            [dt.date(2017, 11, 16), dt.date(1969, 12, 31)],
            [dt.date(2017, 11, 16), dt.date(1969, 12, 31)],
            DateType(),
        ),
        ("hour(tstz)", [TSTZ], [419686], IntegerType()),
        ("identity(s)", ["a", None], ["a", None], StringType()),
        ("l", [5, None], [5, None], LongType()),
    ],
)
def test_transform_results(text: str, values: list[Any], expected: list[Any], result_type: Any) -> None:
    expression = parse_expression_text(text, SCHEMA)
    name = SCHEMA.find_field(expression.source_ids[0]).name

    assert expression.evaluate(column(name, values), SCHEMA).to_pylist() == expected
    assert [expression.evaluate_value(v, SCHEMA) for v in values] == expected
    assert expression.result_type(SCHEMA) == result_type
    assert expression.to_text(SCHEMA) == text


def test_evaluate_accepts_chunked_tables_and_record_batches() -> None:
    expression = parse_expression_text("bucket(16, l)", SCHEMA)
    chunked = pa.concat_tables([column("l", [34]), column("l", [35, None])])
    expected = [expression.evaluate_value(v, SCHEMA) for v in (34, 35, None)]
    assert expected == [3, 5, None]
    assert expression.evaluate(chunked, SCHEMA).to_pylist() == expected
    assert expression.evaluate(chunked.to_batches()[1], SCHEMA).to_pylist() == expected[1:]
    with pytest.raises(InvalidInputError, match=r"^batch has no column 'l' \(columns: s\)$"):
        expression.evaluate(column("s", ["a"]), SCHEMA)


def test_evaluate_accepts_dictionary_view_and_large_layouts() -> None:
    strings = pa.array(["iceberg", None, "iceberg"])
    expected = [Apply("bucket", Reference(3), 16).evaluate_value(v, SCHEMA) for v in strings.to_pylist()]
    for layout in (strings.dictionary_encode(), strings.cast(pa.string_view()), strings.cast(pa.large_string())):
        assert Apply("bucket", Reference(3), 16).evaluate(pa.table({"s": layout}), SCHEMA).to_pylist() == expected
        assert Apply("truncate", Reference(3), 3).evaluate(pa.table({"s": layout}), SCHEMA).to_pylist() == [
            "ice",
            None,
            "ice",
        ]
    binary = pa.table({"b": pa.array([b"\x00\x01\x02"], pa.large_binary())})
    assert Apply("truncate", Reference(8), 2).evaluate(binary, SCHEMA).to_pylist() == [b"\x00\x01"]


def test_metadata_columns_resolve_by_reserved_name() -> None:
    batch = pa.table({"_file": ["s3://b/data/f.parquet"], "_pos": pa.array([7], pa.int64())})
    assert Reference(2147483646).evaluate(batch, SCHEMA).to_pylist() == ["s3://b/data/f.parquet"]
    assert Reference(2147483645).result_type(SCHEMA) == LongType()
    with pytest.raises(InvalidInputError, match=r"^reference to field 2147483644: metadata column '_deleted'"):
        Reference(2147483644).result_type(SCHEMA)
    with pytest.raises(InvalidInputError, match=r"^reference to field 99: no such top-level field in schema 0$"):
        Reference(99).result_type(SCHEMA)


def test_evaluate_value_names_a_bad_value() -> None:
    with pytest.raises(InvalidInputError, match=r"^value 'abc': not a long for field 'l'"):
        Reference(2).evaluate_value("abc", SCHEMA)


# JSON form

APPENDIX_C_BUCKET = {
    "type": "apply",
    "function": {"catalog": "iceberg_functions", "identifier": ["bucket"]},
    "arguments": [256, {"type": "reference", "id": 1}],
}


def test_json_round_trip() -> None:
    expression = IndexExpression.from_json(APPENDIX_C_BUCKET)
    assert expression == Apply("bucket", Reference(1), 256)
    assert expression.to_json() == APPENDIX_C_BUCKET
    for obj in (
        {"type": "reference", "id": 2147483646},
        {
            "type": "apply",
            "function": {"catalog": "iceberg_functions", "identifier": ["day"]},
            "arguments": [{"type": "reference", "id": 5}],
        },
    ):
        assert IndexExpression.from_json(obj).to_json() == obj


@pytest.mark.parametrize(
    "function",
    ["bucket", ["bucket"], {"identifier": ["bucket"]}, {"catalog": "iceberg_functions", "identifier": ["BUCKET"]}],
)
@pytest.mark.parametrize(
    "parameter", [16, {"type": "literal", "value": 16}, {"type": "literal", "value": 16, "data-type": "int"}]
)
def test_json_accepts_every_function_reference_and_literal_form(function: Any, parameter: Any) -> None:
    obj = {"type": "apply", "function": function, "arguments": [parameter, {"type": "reference", "id": 2}]}
    assert IndexExpression.from_json(obj) == Apply("bucket", Reference(2), 16)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"type": "reference", "name": "id"}, "index expressions must reference fields by 'id'"),
        ({"type": "reference", "id": "1"}, "'id' must be an integer"),
        (5, "expected a 'reference' or an 'apply' expression"),
        ({"type": "literal", "value": 5}, "expected a 'reference' or an 'apply' expression"),
        (
            {
                "type": "apply",
                "function": {"catalog": "mine", "identifier": ["bucket"]},
                "arguments": [4, {"type": "reference", "id": 1}],
            },
            "function catalog 'mine' is not 'iceberg_functions'",
        ),
        (
            {"type": "apply", "function": "lower", "arguments": [{"type": "reference", "id": 1}]},
            "function 'lower' is not supported",
        ),
        (
            {"type": "apply", "function": "bucket", "arguments": [{"type": "reference", "id": 1}]},
            "bucket takes 2 argument",
        ),
        (
            {"type": "apply", "function": "bucket", "arguments": [0, {"type": "reference", "id": 1}]},
            "parameter 0 must be a positive integer",
        ),
        (
            {
                "type": "apply",
                "function": "truncate",
                "arguments": [{"type": "literal", "value": 4, "data-type": "string"}, {"type": "reference", "id": 1}],
            },
            "must be an int",
        ),
        ({"type": "apply", "function": ["a", "b"], "arguments": []}, "function reference ['a', 'b'] is malformed"),
    ],
)
def test_json_errors_name_the_expression(obj: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)) as info:
        IndexExpression.from_json(obj)
    assert str(info.value).startswith(("expression ", "function "))


def test_type_errors_name_the_function() -> None:
    with pytest.raises(InvalidInputError, match=r"^function 'year' cannot be applied to type string$"):
        Apply("year", Reference(3)).result_type(SCHEMA)
    with pytest.raises(InvalidInputError, match=r"^function 'bucket' cannot be applied to type double$"):
        Apply("bucket", Reference(10), 4).result_type(SCHEMA)


# Text form


def test_nested_json_expressions_evaluate() -> None:
    expression = Apply("bucket", Apply("truncate", Reference(3), 3), 16)
    assert expression.evaluate(column("s", ["iceberg"]), SCHEMA).to_pylist() == [
        Apply("bucket", Reference(3), 16).evaluate_value("ice", SCHEMA)
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "the table has no top-level column 'nope'"),
        ("lower(s)", "unknown function 'lower'"),
        ("bucket(s)", "bucket takes (positive integer, column)"),
        ("bucket(0, s)", "bucket takes (positive integer, column)"),
        ("bucket(-3, s)", "bucket takes (positive integer, column)"),
        ("truncate(x, s)", "truncate takes (positive integer, column)"),
        ("bucket(4, truncate(2, s))", "bucket applies to a column, not to another function"),
        ("year(s)", "function 'year' cannot be applied to type string"),
        ("hour(d)", "function 'hour' cannot be applied to type date"),
        ("bucket(4, x)", "function 'bucket' cannot be applied to type double"),
        ("", "expected a column name or a transform"),
        ("a)", "expected a column name or a transform"),
    ],
)
def test_text_errors_name_the_input(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(f"expression {text!r}: ") + ".*" + re.escape(message)):
        parse_expression_text(text, SCHEMA)


def test_text_forms() -> None:
    assert parse_expression_text(" bucket( 16 ,  l ) ", SCHEMA) == Apply("bucket", Reference(2), 16)
    assert parse_expression_text("DAY(ts)", SCHEMA) == Apply("day", Reference(5))
    assert parse_expression_text("identity(l)", SCHEMA) == Apply("identity", Reference(2))
    assert parse_expression_text("l", SCHEMA) == Reference(2)


def test_split_expression_list() -> None:
    assert split_expression_list("bucket(16, id), id ,day(ts)") == ["bucket(16, id)", "id", "day(ts)"]
    for bad, message in (("a,,b", "empty expression"), ("bucket(16, id", "unbalanced '('"), ("id)", "unbalanced ')'")):
        with pytest.raises(InvalidInputError, match=re.escape(f"expression list {bad!r}: {message}")):
            split_expression_list(bad)
