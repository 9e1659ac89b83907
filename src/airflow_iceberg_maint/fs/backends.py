"""The storage backend of a location, configured from the table's FileIO properties.

Each backend is imported when a location needs one: the GCS and Azure clients are optional extras, and a
local table imports no cloud client.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any, cast
from weakref import WeakKeyDictionary

from pyiceberg.io import FileIO

from airflow_iceberg_maint.errors import InvalidInputError
from airflow_iceberg_maint.fs.locations import Uri
from airflow_iceberg_maint.fs.storage import Storage

GCS_SCHEMES = frozenset({"gs", "gcs"})
AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
SUPPORTED = "file, s3, s3a, s3n, gs, gcs, abfs, abfss, wasb or wasbs"


def storage_for(location: str, io_properties: Mapping[str, str]) -> Storage:
    """The storage backend for a location, configured from the table's FileIO properties."""
    uri = Uri.parse(location)
    if uri.is_local:
        from airflow_iceberg_maint.fs.local import LocalStorage

        return LocalStorage()
    if uri.scheme in ("s3", "s3a", "s3n"):
        return s3_storage(location, io_properties)
    if uri.scheme in GCS_SCHEMES:
        return cast(Storage, _backend("gcs", "gcs").GcsStorage.from_properties(io_properties))
    if uri.scheme in AZURE_SCHEMES:
        return cast(Storage, _backend("adls", "adls").AzureStorage.from_properties(io_properties, location))
    # Not a ValueError: Airflow would retry it, and no retry can make the scheme supported.
    raise InvalidInputError(f"location {location!r}: scheme {uri.scheme!r} is not supported (expected {SUPPORTED})")


_kept_lock = threading.Lock()
_kept: WeakKeyDictionary[FileIO, dict[tuple[str, str], Storage]] = WeakKeyDictionary()


def table_storage(location: str, io: FileIO) -> Storage:
    """``storage_for`` with ``io``'s properties, built once a store (scheme and authority) while ``io`` lives.

    pyiceberg's FileIO keeps one filesystem a store the same way. Building a boto3 client costs tenths
    of a second of CPU, and one run asks several times (an expiry: the index pin, the index files, the
    delete); a reloaded table has a new FileIO, so credentials vended with the reload get new clients.
    """
    uri = Uri.parse(location)
    key = (uri.scheme, uri.authority)
    with _kept_lock:
        found = _kept.setdefault(io, {}).get(key)
    if found is None:
        built = storage_for(location, io.properties)
        with _kept_lock:
            found = _kept.setdefault(io, {}).setdefault(key, built)
    return found


def s3_storage(location: str, props: Mapping[str, Any]) -> Storage:
    """The backend for an S3 location: boto3 when it can act as the FileIO does, else the FileIO's filesystem."""
    from airflow_iceberg_maint.fs.s3_client import uses_file_io_filesystem

    if uses_file_io_filesystem(props):
        from airflow_iceberg_maint.fs.fileio import FileIOStorage

        return FileIOStorage.for_location(location, props)
    from airflow_iceberg_maint.fs.s3 import S3Storage

    return S3Storage.from_properties(props)


def _backend(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(f"airflow_iceberg_maint.fs.{module}")
    except ImportError as exc:
        raise ImportError(f"{exc}: install the client with 'pip install airflow-iceberg-maint[{extra}]'") from exc
