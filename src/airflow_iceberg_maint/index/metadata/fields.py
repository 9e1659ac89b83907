"""The field types of the index metadata models, and the errors that name the bad field (S7).

The models (``model``) are pydantic dataclasses, as pyiceberg models table metadata with pydantic:
each field's JSON key is its name in kebab case, values are checked as they are read, and a
field with a default (an optional field of the format) is written only when it holds something.
``input_error`` turns the first validation failure into an ``InvalidInputError`` whose message
names the field by its JSON path (``extracts[0].tracking-file-size-in-bytes: ...``).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    StrictInt,
    StringConstraints,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic.dataclasses import dataclass
from pydantic.functional_serializers import model_serializer
from pydantic_core import PydanticCustomError
from pydantic_core.core_schema import SerializerFunctionWrapHandler
from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType, NestedField, PrimitiveType

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.index.metadata.expressions import IndexExpression


def json_key(name: str) -> str:
    """The JSON key of a model field: its name in kebab case (``tracking_file`` -> ``tracking-file``)."""
    return name.replace("_", "-")


#: Every metadata model: kebab-case JSON keys, Python names in code, types pydantic does not know.
MODEL_CONFIG = ConfigDict(
    alias_generator=json_key,
    validate_by_alias=True,
    validate_by_name=True,
    serialize_by_alias=True,
    arbitrary_types_allowed=True,
)

_FIELD_ERROR = "index_metadata_field"


def reject(reason: str, key: str = "") -> PydanticCustomError:
    """A validation failure of the value at hand (or of its member ``key``), for ``input_error``."""
    return PydanticCustomError(_FIELD_ERROR, "{reason}", {"reason": reason, "key": key})


def _json_path(loc: tuple[int | str, ...], top: str) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else part
    return path or top


_REASONS = {
    "int_type": "expected an integer, got {input!r}",
    "string_type": "expected a non-empty string, got {input!r}",
    "string_too_short": "expected a non-empty string, got {input!r}",
    "tuple_type": "expected a list, got {input!r}",
    "dataclass_type": "expected an object, got {input!r}",
    "dataclass_args_type": "expected an object, got {input!r}",
}


def input_error(exc: PydanticValidationError, top: str) -> InvalidInputError:
    """The first failure of ``exc`` as an ``InvalidInputError`` naming the field; ``top`` names the whole."""
    error = exc.errors(include_url=False)[0]
    loc, kind, ctx = tuple(error["loc"]), error["type"], error.get("ctx", {})
    if kind == "missing":
        return InvalidInputError(f"{_json_path(loc[:-1], top)}: required field {loc[-1]!r} is missing")
    path = _json_path(loc, top)
    if kind == _FIELD_ERROR:
        path, reason = f"{path}.{ctx['key']}" if ctx["key"] else path, ctx["reason"]
    elif kind == "value_error":
        reason = str(ctx["error"])
    else:
        reason = _REASONS.get(kind, "{msg}").format(input=error["input"], msg=error["msg"])
    return InvalidInputError(f"{path}: {reason}")


@dataclass(frozen=True, config=MODEL_CONFIG)
class SpecObject:
    """Base of the models: an optional field (one with a default) is written only when not empty.

    ``json_required`` names the JSON keys a file must hold although code may leave them to their
    defaults (``format-version``, ...).
    """

    json_required: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _required_in_json(cls, data: Any) -> Any:
        missing = next((key for key in cls.json_required if key not in data), None) if isinstance(data, dict) else None
        if missing is not None:
            raise reject(f"required field {missing!r} is missing")
        return data

    @model_serializer(mode="wrap")
    def _without_empty_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        optional = {
            json_key(f.name)
            for f in dataclasses.fields(self)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }
        return {key: value for key, value in out.items() if key not in optional or value not in (None, [], {})}


def _none_as_empty(value: Any) -> Any:
    return () if value is None else value  # a missing or null list reads as empty


def _uuid_text(value: str) -> str:
    try:
        uuid.UUID(value)
    except ValueError as exc:
        raise reject(f"{value!r} is not a UUID") from exc
    return value


def _string_map(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise reject(f"expected a map of strings to strings, got {value!r}")
    return dict(value)


def _primitive_type(value: Any) -> PrimitiveType:
    if isinstance(value, PrimitiveType):
        return value
    try:
        parsed = NestedField.model_validate({"id": 1, "name": "x", "type": value, "required": False}).field_type
    except PydanticValidationError as exc:
        raise reject(f"{value!r} is not an Iceberg type") from exc
    if not isinstance(parsed, PrimitiveType):
        raise reject(f"{value!r} is not a primitive type")
    return parsed


def type_to_json(value: IcebergType) -> Any:
    return json.loads(NestedField(1, "x", value, required=False).model_dump_json())["type"]


def _extract_schema(value: Any) -> Schema:
    if isinstance(value, Schema):
        return value
    if not isinstance(value, dict):
        raise reject(f"expected an object, got {value!r}")
    if value.get("type") != "struct":
        raise reject("expected 'struct'", "type")
    if "schema-id" not in value:
        raise reject("required field 'schema-id' is missing")
    schema_id = value["schema-id"]
    if not isinstance(schema_id, int) or isinstance(schema_id, bool):
        raise reject(f"expected an integer, got {schema_id!r}", "schema-id")
    try:
        return Schema.model_validate(value)
    except PydanticValidationError as exc:
        raise reject(f"not a valid Iceberg schema ({exc})") from exc


def _schema_to_json(schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(schema.model_dump_json())
    if not out.get("identifier-field-ids"):
        out.pop("identifier-field-ids", None)
    return out


def _expression(value: Any) -> IndexExpression:
    return value if isinstance(value, IndexExpression) else IndexExpression.from_json(value)


Int = StrictInt
Text = Annotated[str, StringConstraints(strict=True, min_length=1)]
UuidText = Annotated[Text, AfterValidator(_uuid_text)]
StringMap = Annotated[Mapping[str, str], PlainValidator(_string_map)]
DataType = Annotated[PrimitiveType, PlainValidator(_primitive_type), PlainSerializer(type_to_json)]
ExtractSchema = Annotated[Schema, PlainValidator(_extract_schema), PlainSerializer(_schema_to_json)]
Expression = Annotated[
    IndexExpression, PlainValidator(_expression), PlainSerializer(lambda expression: expression.to_json())
]
#: A JSON list (``null`` or missing reads as empty), held as a tuple.
Items = BeforeValidator(_none_as_empty)
