"""Plans that read chosen fields of Avro records and skip the rest, safely, from the writer's schema.

How a field is skipped comes from the writer's Avro schema in the file's header, never from the
Iceberg type: one Iceberg type has several Avro encodings (a decimal is ``fixed`` in the Iceberg
spec and ``bytes`` in plain Avro; a uuid is ``fixed`` or ``string``), and one wrong skip shifts
every later field. pyiceberg's ``DecimalReader.skip`` reads a ``fixed`` decimal as length-prefixed
bytes, which is why decimal partitions could not be scanned (issue 9, item 5).

pyiceberg's Cython decoder checks only that a varint starts inside its buffer, so the plans here
keep every access inside it themselves:

- every length or count taken from the data is checked against the bytes left in the block
  before it is used, the position is checked after every record, and each block must be used
  up exactly (a skip that went wrong shows there);
- between two checks a plan advances by at most ``reach`` bytes (known from the schema), and the
  buffer has that many zero bytes after the block: a varint stops at a zero byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, cast

from airflow_iceberg_maint.pyiceberg_compat import BinaryDecoder

Step = Callable[[BinaryDecoder, int], Any]  # (decoder, end of the block's bytes) -> value read, or None
Want = dict[int, "Want | None"]  # field ids to read: a nested Want for a record, None for an int or a string

_VARINT = 10  # the most bytes one varint takes
_CHUNK = 16  # array items decoded by one checked bulk call (the zero padding grows with it)
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class Damaged(ValueError):
    """The bytes do not match the file's own schema."""


def _check(decoder: BinaryDecoder, end: int, size: int) -> None:
    if size < 0 or size > end - decoder.tell():
        raise Damaged(f"a length of {size} bytes runs past the end of its block")


# A skip is a list of ops, merged so a run of fields costs one call:
# ("int", k) k varints; ("fixed", n) n bytes; ("step", step, reach) anything else.
Op = tuple[Any, ...]


def _merge(ops: Iterable[Op]) -> list[Op]:
    merged: list[Op] = []
    for op in ops:
        if merged and op[0] != "step" and merged[-1][0] == op[0]:
            merged[-1] = (op[0], merged[-1][1] + op[1])
        elif op[0] == "step" or op[1]:
            merged.append(op)
    return merged


def _reach(ops: list[Op]) -> int:
    return sum(op[2] if op[0] == "step" else op[1] * (_VARINT if op[0] == "int" else 1) for op in ops)


def _step(op: Op) -> Step:
    kind, arg = op[0], op[1]
    if kind == "step":
        return cast(Step, arg)
    if kind == "fixed":
        return lambda d, end: d.skip(arg)
    return (lambda d, end: d.read_int()) if arg == 1 else (lambda d, end: d.read_ints(arg))


def _run(ops: list[Op]) -> Step:
    steps = tuple(_step(op) for op in ops)
    if len(steps) == 1:
        return steps[0]

    def run(d: BinaryDecoder, end: int) -> None:
        for step in steps:
            step(d, end)

    return run


def _skip_bytes(d: BinaryDecoder, end: int) -> None:
    size = d.read_int()
    _check(d, end, size)
    d.skip(size)


def _read_string(d: BinaryDecoder, end: int) -> str:
    size = d.read_int()
    _check(d, end, size)
    return d.read(size).decode("utf-8")


def _union(branches: tuple[Step | None, ...]) -> Step:
    def union(d: BinaryDecoder, end: int) -> Any:
        index = d.read_int()
        if not 0 <= index < len(branches):
            raise Damaged(f"union branch {index} of {len(branches)}")
        branch = branches[index]
        return None if branch is None else branch(d, end)

    return union


def _blocks(items: Callable[[BinaryDecoder, int, int], None]) -> Step:
    """An array's or map's blocks; ``items(decoder, end, count)`` skips one block's items."""

    def blocks(d: BinaryDecoder, end: int) -> None:
        count = d.read_int()
        while count:
            if count < 0:  # the block gives its size in bytes too: skip it whole
                size = d.read_int()
                _check(d, end, size)
                d.skip(size)
            else:
                items(d, end, count)
            count = d.read_int()

    return blocks


def _array(item: list[Op]) -> Op:
    """The skip of an array (or map) whose items are skipped by ``item``."""
    if not item:

        def items(d: BinaryDecoder, end: int, count: int) -> None:
            pass

        reach = 0
    elif len(item) == 1 and item[0][0] == "int":  # metrics maps of int to long, split offsets, equality ids
        width = item[0][1]

        def items(d: BinaryDecoder, end: int, count: int) -> None:
            while count > 0:
                n = min(count, _CHUNK)
                _check(d, end, n * width)  # each varint takes a byte at least
                d.read_ints(n * width)
                count -= n

        reach = _CHUNK * width * _VARINT
    elif len(item) == 1 and item[0][0] == "fixed":
        size = item[0][1]

        def items(d: BinaryDecoder, end: int, count: int) -> None:
            _check(d, end, count * size)
            d.skip(count * size)

        reach = 0
    elif len(item) == 2 and item[0][0] == "int" and item[1][1] is _skip_bytes:  # metrics maps of int to bytes
        keys = _step(item[0])

        def items(d: BinaryDecoder, end: int, count: int) -> None:
            _check(d, end, count)
            for _ in range(count):
                keys(d, end)
                size = d.read_int()
                _check(d, end, size)
                d.skip(size)

        reach = _reach(item)
    else:  # each item takes a byte at least; check before each, so an overrun is one item at most
        run = _run(item)

        def items(d: BinaryDecoder, end: int, count: int) -> None:
            _check(d, end, count)
            for _ in range(count):
                if d.tell() > end:
                    raise Damaged("an array runs past the end of its block")
                run(d, end)

        reach = _reach(item)
    return ("step", _blocks(items), 2 * _VARINT + reach)


class _Compiler:
    """Turns a writer's Avro schema into a plan that reads the wanted fields and skips the rest."""

    def __init__(self) -> None:
        self.names: dict[str, Any] = {}  # named types seen so far (a recursive record ends in RecursionError)

    def _resolve(self, schema: Any) -> Any:
        """The schema itself for a named reference, a bare primitive's name, or a nested ``type``."""
        while True:
            if isinstance(schema, str) and schema not in _PRIMITIVES:
                found = self.names.get(schema, self.names.get(schema.rsplit(".", 1)[-1]))
                if found is None:
                    raise Damaged(f"unknown Avro type {schema!r}")
                schema = found
            elif isinstance(schema, dict) and not isinstance(schema.get("type"), str):
                schema = schema.get("type")
            else:
                return schema

    def _kind(self, schema: Any) -> str:
        if isinstance(schema, list):
            return "union"
        kind = schema if isinstance(schema, str) else schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            name = str(schema["name"])
            namespace = schema.get("namespace")
            self.names[name.rsplit(".", 1)[-1]] = schema
            self.names[f"{namespace}.{name}" if namespace and "." not in name else name] = schema
        return str(kind)

    def skip(self, schema: Any) -> list[Op]:
        schema = self._resolve(schema)
        kind = self._kind(schema)
        if kind in ("int", "long", "enum"):
            return [("int", 1)]
        if kind in ("boolean", "float", "double", "fixed"):
            size = {"boolean": 1, "float": 4, "double": 8}.get(kind) or int(schema["size"])
            if size < 0:
                raise Damaged(f"fixed size {size}")
            return [("fixed", size)]
        if kind in ("bytes", "string"):
            return [("step", _skip_bytes, _VARINT)]
        if kind == "null":
            return []
        if kind in ("record", "error"):
            return _merge(op for field in self._fields(schema) for op in self.skip(field["type"]))
        if kind == "array":
            return [_array(self.skip(schema["items"]))]
        if kind == "map":  # string keys
            return [_array(_merge([("step", _skip_bytes, _VARINT), *self.skip(schema["values"])]))]
        if kind == "union":
            branches = [self.skip(branch) for branch in schema]
            step = _union(tuple(_run(ops) if ops else None for ops in branches))
            return [("step", step, _VARINT + max((_reach(ops) for ops in branches), default=0))]
        raise Damaged(f"unknown Avro type {kind!r}")

    @staticmethod
    def _fields(schema: dict[str, Any]) -> list[dict[str, Any]]:
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise Damaged(f"Avro record {schema.get('name')!r} has no fields")
        return fields

    def read(self, schema: Any, want: Want | None) -> tuple[Step | None, int]:
        """A step that reads what ``want`` asks for (None for a null), and its reach."""
        schema = self._resolve(schema)
        kind = self._kind(schema)
        if kind == "null":
            return None, 0
        if kind == "union":
            plans = [self.read(branch, want) for branch in schema]
            return _union(tuple(step for step, _ in plans)), _VARINT + max((reach for _, reach in plans), default=0)
        if want is None:
            if kind in ("int", "long"):
                return (lambda d, end: d.read_int()), _VARINT
            if kind == "string":
                return _read_string, _VARINT
            raise Damaged(f"expected an int, a long or a string, found {kind!r}")
        if kind not in ("record", "error"):
            raise Damaged(f"expected a record, found {kind!r}")
        return self._record(schema, want)

    def _record(self, schema: dict[str, Any], want: Want) -> tuple[Step, int]:
        fields = self._fields(schema)
        ids = {field.get("field-id") for field in fields}
        if missing := [fid for fid in want if fid not in ids]:
            raise Damaged(f"record {schema.get('name')!r} has no field with id {missing[0]}")
        positions = {fid: pos for pos, fid in enumerate(want)}
        plan: list[tuple[int, Step]] = []
        reach = 0
        skipped: list[Op] = []
        for field in fields:
            fid = field.get("field-id")
            if fid not in positions:
                skipped.extend(self.skip(field["type"]))
                continue
            skipped = _merge(skipped)
            plan.extend((-1, _step(op)) for op in skipped)
            reach += _reach(skipped)
            skipped = []
            step, field_reach = self.read(field["type"], want[fid])
            if step is None:
                raise Damaged(f"field {fid} is always null")
            plan.append((positions[fid], step))
            reach += field_reach
        skipped = _merge(skipped)
        plan.extend((-1, _step(op)) for op in skipped)
        reach += _reach(skipped)
        steps, size = tuple(plan), len(want)

        def record(d: BinaryDecoder, end: int) -> list[Any]:
            out: list[Any] = [None] * size
            for pos, step in steps:
                if pos < 0:
                    step(d, end)
                else:
                    out[pos] = step(d, end)
            return out

        return record, reach


_plans: dict[tuple[bytes, str], tuple[Step, bytes]] = {}


def record_plan(schema: bytes, name: str, want: Want) -> tuple[Step, bytes]:
    """The record reader for a file schema, and the zero padding its blocks need (cached).

    A table's manifests share a handful of schemas, and compiling costs more than decoding one.
    """
    key = (schema, name)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= 256:  # many tables with many schemas: start over rather than grow
            _plans.clear()
        read, reach = _Compiler().read(json.loads(schema), want)
        if read is None:
            raise Damaged("the file's records are always null")
        plan = _plans[key] = (read, bytes(reach + _VARINT))
    return plan
