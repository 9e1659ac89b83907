"""Why a table's metadata could not be loaded, in one line (S2, S7).

Whatever a catalog or pyiceberg raises while a table is loaded or reloaded becomes an
``IncompleteMetadataError`` naming the table and, when known, its metadata file: a
``DamagedMetadataError`` (not retryable: a committed metadata file is never rewritten) when the
metadata cannot be parsed, else a retryable one (a catalog or store that did not answer).

A format-v1 snapshot that lists its manifests inline (``manifests`` instead of ``manifest-list``,
which the v1 spec allows) is refused, not read: pyiceberg cannot hold such a snapshot, so no part
of the library (orphan reference walk, expiry, index) could read its manifests, and a snapshot
whose manifests are unknown would make its files look unreferenced.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from types import FrameType
from typing import Any

from pydantic import ValidationError as PydanticValidationError
from pyiceberg.exceptions import ValidationError as PyicebergValidationError
from pyiceberg.io import InputFile

from airflow_iceberg_maint.errors import DamagedMetadataError, IncompleteMetadataError

# What a file that cannot be parsed raises besides pydantic's errors.
_UNPARSABLE = (ValueError, PyicebergValidationError, EOFError, zlib.error, gzip.BadGzipFile)
# The module whose frames parse table metadata.
_PARSER = "pyiceberg.table.metadata"
# How much of an error's own text a line keeps (pydantic quotes the input it could not parse).
_DETAIL_CHARS = 300


def metadata_failure(identifier: str, exc: Exception, location: str | None = None) -> IncompleteMetadataError:
    """The one-line error for ``exc``, raised while the metadata of table ``identifier`` was loaded.

    ``location``: the metadata file being read, when the caller knows it; else the file pyiceberg was
    reading when it failed, if any.
    """
    location = location or _file_being_read(exc)
    subject = f"table {identifier!r}: " + (f"its metadata file {location}" if location else "its metadata")
    invalid = _pydantic_error(exc)
    if invalid is not None:
        inline = _inline_manifests(invalid)
        if inline is not None:
            return DamagedMetadataError(
                f"{subject}: snapshot {inline} lists its manifests inline ('manifests', format v1) instead "
                "of in a manifest list, which this tool cannot read; refused, nothing was done"
            )
        return DamagedMetadataError(f"{subject} cannot be parsed ({_summary(invalid)}); nothing was done")
    if isinstance(exc, _UNPARSABLE) or _raised_while_parsing(exc):  # not JSON, not UTF-8, broken gzip...
        return DamagedMetadataError(f"{subject} cannot be parsed ({_text(exc)}); nothing was done")
    return IncompleteMetadataError(
        f"{subject} cannot be read ({_text(exc)}); a catalog's answer may leave snapshots out, so nothing was done"
    )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        one = todo.pop()
        if id(one) in seen:
            continue
        seen.add(id(one))
        yield one
        todo.extend(e for e in (one.__cause__, one.__context__, *one.args) if isinstance(e, BaseException))


def _pydantic_error(exc: Exception) -> PydanticValidationError | None:
    return next((e for e in _causes(exc) if isinstance(e, PydanticValidationError)), None)


def _inline_manifests(invalid: PydanticValidationError) -> Any:
    """The id of a snapshot pydantic refused for lacking a manifest list while it lists ``manifests``."""
    for error in invalid.errors():
        given = error.get("input")
        if error["loc"] and error["loc"][-1] == "manifest-list" and isinstance(given, dict) and "manifests" in given:
            return given.get("snapshot-id", "?")
    return None


def _summary(invalid: PydanticValidationError) -> str:
    errors = invalid.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f"; and {len(errors) - 1} more" if len(errors) > 1 else ""
    return _clip(f"{where + ': ' if where else ''}{first['msg']}{more}")


def _text(exc: BaseException) -> str:
    return _clip(f"{type(exc).__name__}: {exc}")


def _clip(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _DETAIL_CHARS else line[: _DETAIL_CHARS - 3] + "..."


def _frames(exc: BaseException) -> Iterator[FrameType]:
    for one in _causes(exc):
        tb = one.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next


def _raised_while_parsing(exc: BaseException) -> bool:
    """Whether ``exc`` came out of pyiceberg's parsing of table metadata (a validator's own error, a
    ``TypeError`` on a value of the wrong type), not out of reading it."""
    return any(frame.f_globals.get("__name__") == _PARSER for frame in _frames(exc))


def _file_being_read(exc: BaseException) -> str | None:
    """The location of the last ``InputFile`` a frame of the failure held (a SQL, Glue or Hive catalog
    reads the metadata file itself), or None (a REST catalog sends the metadata in its answer)."""
    found: str | None = None
    for frame in _frames(exc):
        for value in frame.f_locals.values():
            if isinstance(value, InputFile):
                found = value.location
    return found
