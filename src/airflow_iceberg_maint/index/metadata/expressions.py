"""Index expressions: the JSON value-expression form of the index metadata (docs/index-format.md),
the CLI text form, and evaluation.

An expression is a ``reference`` to a field by ID, or an ``apply`` of one of the
``iceberg_functions`` partition transforms (``identity``, ``bucket``, ``truncate``, ``year``,
``month``, ``day``, ``hour``) to an expression. Evaluation goes through pyiceberg's transforms
(backed by pyiceberg-core), so ``bucket`` hashes exactly as Iceberg Java does.

References resolve against a pyiceberg ``Schema`` (the table schema when evaluating source rows,
the extract schema when evaluating index entries), plus the metadata columns of the table spec,
which a batch carries under their reserved names (``_file``, ``_pos``, ...).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    DateType,
    GeographyType,
    GeometryType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    UnknownType,
)

from airflow_iceberg_maint.errors import InvalidInputError

ICEBERG_FUNCTIONS = "iceberg_functions"

#: Metadata columns an index may read (table spec "reserved field IDs"), with their types.
METADATA_COLUMNS: dict[int, NestedField] = {
    2147483646: NestedField(2147483646, "_file", StringType(), required=True),
    2147483645: NestedField(2147483645, "_pos", LongType(), required=True),
    2147483643: NestedField(2147483643, "_spec_id", IntegerType(), required=True),
    2147483540: NestedField(2147483540, "_row_id", LongType(), required=False),
    2147483539: NestedField(2147483539, "_last_updated_sequence_number", LongType(), required=False),
}
FILE_COLUMN_ID = 2147483646
POS_COLUMN_ID = 2147483645

#: Metadata columns that cannot be evaluated from one row of one snapshot, so no extract schema may hold them
#: (docs/index-format.md, "Rules checked on every read and write").
FORBIDDEN_COLUMNS: dict[int, str] = {
    2147483644: "_deleted",
    2147483642: "_partition",
    2147483543: "_change_type",
    2147483542: "_change_ordinal",
    2147483541: "_commit_snapshot_id",
    2147483546: "file_path",
    2147483545: "pos",
    2147483544: "row",
}

#: Transforms taking only the value, and those taking an int parameter first (N or W).
UNARY_FUNCTIONS = ("identity", "year", "month", "day", "hour")
PARAMETERIZED_FUNCTIONS = ("bucket", "truncate")


def resolve_field(schema: Schema, field_id: int) -> NestedField:
    """The top-level schema field or metadata column with this ID; anything else is refused."""
    if field_id in METADATA_COLUMNS:
        return METADATA_COLUMNS[field_id]
    if field_id in FORBIDDEN_COLUMNS:
        raise InvalidInputError(
            f"reference to field {field_id}: metadata column {FORBIDDEN_COLUMNS[field_id]!r} cannot be indexed"
        )
    for field in schema.fields:
        if field.field_id == field_id:
            return field
    raise InvalidInputError(f"reference to field {field_id}: no such top-level field in schema {schema.schema_id}")


def is_orderable(field_type: Any) -> bool:
    """Whether Iceberg defines an order for values of this type (ordering-key fields must be)."""
    return isinstance(field_type, PrimitiveType) and not isinstance(
        field_type, (GeometryType, GeographyType, UnknownType)
    )


def _transform(function: str, parameter: int | None) -> Transform[Any, Any]:
    if function == "bucket":
        return BucketTransform(parameter or 0)
    if function == "truncate":
        return TruncateTransform(parameter or 0)
    return {
        "identity": IdentityTransform(),
        "year": YearTransform(),
        "month": MonthTransform(),
        "day": DayTransform(),
        "hour": HourTransform(),
    }[function]


def _column(batch: pa.Table | pa.RecordBatch, name: str) -> pa.Array:
    if name not in batch.schema.names:
        raise InvalidInputError(f"batch has no column {name!r} (columns: {', '.join(batch.schema.names)})")
    column = batch.column(name)
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _plain(values: pa.Array) -> pa.Array:
    """Arrow layouts pyiceberg-core's transforms accept: no dictionaries, views or large binary."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_string_view(values.type):
        return values.cast(pa.large_string())
    if pa.types.is_large_binary(values.type) or pa.types.is_binary_view(values.type):
        return values.cast(pa.binary())
    return values


class IndexExpression(ABC):
    """A deterministic value expression over the fields of one row."""

    @property
    @abstractmethod
    def source_ids(self) -> tuple[int, ...]:
        """IDs of the fields the expression references, in order of first use."""

    @abstractmethod
    def to_json(self) -> Any:
        """The JSON form of the index metadata (round-trips through ``from_json``)."""

    @abstractmethod
    def result_type(self, schema: Schema) -> PrimitiveType:
        """The type of the value produced, given the schema the references resolve in."""

    @abstractmethod
    def evaluate(self, batch: pa.Table | pa.RecordBatch, schema: Schema) -> pa.Array:
        """Evaluate over a batch whose columns are named by ``schema``'s field names (or ``_file``, ...)."""

    @abstractmethod
    def to_text(self, schema: Schema) -> str:
        """The CLI text form, such as ``bucket(16, id)``."""

    @abstractmethod
    def remap(self, ids: dict[int, int]) -> IndexExpression:
        """The same expression with references renumbered (IDs absent from ``ids`` are kept)."""

    def evaluate_value(self, value: Any, schema: Schema) -> Any:
        """Evaluate for one Python value of the single referenced field (a lookup key)."""
        if len(self.source_ids) != 1:
            raise InvalidInputError(f"expression {self.to_json()!r}: needs exactly one referenced field")
        field = resolve_field(schema, self.source_ids[0])
        arrow_type = schema_to_pyarrow(Schema(NestedField(field.field_id, field.name, field.field_type))).field(0).type
        try:
            column = pa.array([value], type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            message = f"value {value!r}: not a {field.field_type} for field {field.name!r} ({exc})"
            raise InvalidInputError(message) from exc
        return self.evaluate(pa.table({field.name: column}), schema)[0].as_py()

    @classmethod
    def from_json(cls, obj: Any) -> IndexExpression:
        """Parse the JSON form of the index metadata; errors name the offending JSON (S7)."""
        if isinstance(obj, dict) and obj.get("type") == "reference":
            if "id" not in obj:
                raise InvalidInputError(f"expression {obj!r}: index expressions must reference fields by 'id'")
            field_id = obj["id"]
            if not isinstance(field_id, int) or isinstance(field_id, bool):
                raise InvalidInputError(f"expression {obj!r}: 'id' must be an integer")
            return Reference(field_id)
        if isinstance(obj, dict) and obj.get("type") == "apply":
            return Apply.from_json(obj)
        raise InvalidInputError(f"expression {obj!r}: expected a 'reference' or an 'apply' expression")


@dataclass(frozen=True)
class Reference(IndexExpression):
    """A field of the row, by ID (a schema field or a metadata column)."""

    field_id: int

    @property
    def source_ids(self) -> tuple[int, ...]:
        return (self.field_id,)

    def to_json(self) -> Any:
        return {"type": "reference", "id": self.field_id}

    def result_type(self, schema: Schema) -> PrimitiveType:
        field_type = resolve_field(schema, self.field_id).field_type
        if not isinstance(field_type, PrimitiveType):
            raise InvalidInputError(f"reference to field {self.field_id}: type {field_type} is not primitive")
        return field_type

    def evaluate(self, batch: pa.Table | pa.RecordBatch, schema: Schema) -> pa.Array:
        return _column(batch, resolve_field(schema, self.field_id).name)

    def to_text(self, schema: Schema) -> str:
        return resolve_field(schema, self.field_id).name

    def remap(self, ids: dict[int, int]) -> IndexExpression:
        return Reference(ids.get(self.field_id, self.field_id))


def _literal_int(arg: Any, where: str) -> int:
    """An int literal argument: a bare JSON value or ``{"type": "literal", "value": N}``."""
    value = arg
    if isinstance(arg, dict) and arg.get("type") == "literal":
        if arg.get("data-type", "int") not in ("int", "long"):
            raise InvalidInputError(f"{where}: literal {arg!r} must be an int")
        value = arg.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidInputError(f"{where}: parameter {arg!r} must be a positive integer")
    return value


def _function_name(ref: Any, obj: Any) -> str:
    """The function name of a FUNC_REF; only ``iceberg_functions`` (or no catalog) is accepted."""
    catalog: Any = None
    if isinstance(ref, str):
        identifier: Any = [ref]
    elif isinstance(ref, list):
        identifier = ref
    elif isinstance(ref, dict):
        identifier, catalog = ref.get("identifier"), ref.get("catalog")
    else:
        identifier = None
    if not (isinstance(identifier, list) and len(identifier) == 1 and isinstance(identifier[0], str)):
        raise InvalidInputError(f"expression {obj!r}: function reference {ref!r} is malformed")
    if catalog not in (None, ICEBERG_FUNCTIONS):
        raise InvalidInputError(f"expression {obj!r}: function catalog {catalog!r} is not {ICEBERG_FUNCTIONS!r}")
    name = identifier[0].lower()
    if name not in UNARY_FUNCTIONS + PARAMETERIZED_FUNCTIONS:
        raise InvalidInputError(
            f"expression {obj!r}: function {identifier[0]!r} is not supported "
            f"(expected one of {', '.join(PARAMETERIZED_FUNCTIONS + UNARY_FUNCTIONS)})"
        )
    return name


@dataclass(frozen=True)
class Apply(IndexExpression):
    """An ``iceberg_functions`` transform applied to an expression; ``parameter`` is N or W."""

    function: str
    argument: IndexExpression
    parameter: int | None = None

    def __post_init__(self) -> None:
        wants_parameter = self.function in PARAMETERIZED_FUNCTIONS
        if self.function not in UNARY_FUNCTIONS + PARAMETERIZED_FUNCTIONS:
            raise InvalidInputError(f"function {self.function!r} is not supported")
        if wants_parameter != (self.parameter is not None) or (self.parameter is not None and self.parameter <= 0):
            raise InvalidInputError(f"function {self.function!r}: parameter {self.parameter!r} is invalid")

    @classmethod
    def from_json(cls, obj: Any) -> Apply:
        name = _function_name(obj.get("function"), obj)
        args = obj.get("arguments")
        arity = 2 if name in PARAMETERIZED_FUNCTIONS else 1
        if not isinstance(args, list) or len(args) != arity:
            raise InvalidInputError(f"expression {obj!r}: {name} takes {arity} argument(s)")
        parameter = _literal_int(args[0], f"expression {obj!r}") if arity == 2 else None
        return cls(name, IndexExpression.from_json(args[-1]), parameter)

    @property
    def transform(self) -> Transform[Any, Any]:
        return _transform(self.function, self.parameter)

    @property
    def source_ids(self) -> tuple[int, ...]:
        return self.argument.source_ids

    def to_json(self) -> Any:
        arguments: list[Any] = [] if self.parameter is None else [self.parameter]
        arguments.append(self.argument.to_json())
        return {
            "type": "apply",
            "function": {"catalog": ICEBERG_FUNCTIONS, "identifier": [self.function]},
            "arguments": arguments,
        }

    def result_type(self, schema: Schema) -> PrimitiveType:
        source = self.argument.result_type(schema)
        transform = self.transform
        if not transform.can_transform(source):
            raise InvalidInputError(f"function {self.function!r} cannot be applied to type {source}")
        result = transform.result_type(source)
        assert isinstance(result, PrimitiveType)
        return result

    def evaluate(self, batch: pa.Table | pa.RecordBatch, schema: Schema) -> pa.Array:
        source = self.argument.result_type(schema)
        values = _plain(self.argument.evaluate(batch, schema))
        result = self.transform.pyarrow_transform(source)(values)
        # pyiceberg-core returns day ordinals as int32; the function's result type is date.
        return result.cast(pa.date32()) if isinstance(self.result_type(schema), DateType) else result

    def to_text(self, schema: Schema) -> str:
        self.result_type(schema)
        return self._text(self.argument.to_text(schema))

    def _text(self, inner: str) -> str:
        if self.parameter is None:
            return f"{self.function}({inner})"
        return f"{self.function}({self.parameter}, {inner})"

    def remap(self, ids: dict[int, int]) -> IndexExpression:
        return Apply(self.function, self.argument.remap(ids), self.parameter)


_CALL_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$", re.DOTALL)
_INT_RE = re.compile(r"^\s*([0-9]+)\s*$")


def parse_expression_text(text: str, schema: Schema) -> IndexExpression:
    """Parse the CLI form: ``col``, ``bucket(N, col)``, ``truncate(W, col)``, ``year(col)``, ...

    Column names resolve against the top-level fields of ``schema``. Errors name the input (S7).
    """
    match = _CALL_RE.match(text)
    if not match:
        name = text.strip()
        if not name or any(ch in name for ch in "(),"):
            raise InvalidInputError(f"expression {text!r}: expected a column name or a transform like bucket(16, id)")
        field = next((f for f in schema.fields if f.name == name), None)
        if field is None:
            raise InvalidInputError(f"expression {text!r}: the table has no top-level column {name!r}")
        expression: IndexExpression = Reference(field.field_id)
    else:
        function, inner = match.group(1).lower(), match.group(2)
        if function not in UNARY_FUNCTIONS + PARAMETERIZED_FUNCTIONS:
            raise InvalidInputError(
                f"expression {text!r}: unknown function {match.group(1)!r} "
                f"(expected one of {', '.join(PARAMETERIZED_FUNCTIONS + UNARY_FUNCTIONS)})"
            )
        parameter: int | None = None
        if function in PARAMETERIZED_FUNCTIONS:
            first, sep, inner = inner.partition(",")
            number = _INT_RE.match(first)
            if not sep or not number or int(number.group(1)) <= 0:
                raise InvalidInputError(f"expression {text!r}: {function} takes (positive integer, column)")
            parameter = int(number.group(1))
        if _CALL_RE.match(inner):
            raise InvalidInputError(f"expression {text!r}: {function} applies to a column, not to another function")
        expression = Apply(function, parse_expression_text(inner, schema), parameter)
    try:
        result = expression.result_type(schema)
    except InvalidInputError as exc:
        raise InvalidInputError(f"expression {text!r}: {exc}") from exc
    if not is_orderable(result):
        raise InvalidInputError(f"expression {text!r}: type {result} has no defined order")
    return expression


def split_expression_list(text: str) -> list[str]:
    """Split ``"bucket(16, id), id"`` at top-level commas."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise InvalidInputError(f"expression list {text!r}: unbalanced ')'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise InvalidInputError(f"expression list {text!r}: unbalanced '('")
    parts.append(text[start:].strip())
    if any(not p for p in parts):
        raise InvalidInputError(f"expression list {text!r}: empty expression")
    return parts
