"""Where indexes live and how their metadata is committed.

Each index of a table lives at ``<table-location>/index/<name>/``. Its metadata files are
numbered: ``metadata/00001.metadata.json``, ``00002...``; the highest number is the current
metadata. A commit writes version N+1 only if no file of that name exists (exclusive create on
local disks, ``If-None-Match: *`` on S3 and Azure, ``ifGenerationMatch=0`` on GCS), so of two
writers that started from version N exactly one wins; the other re-reads and re-applies its update on top of the winner,
up to a limit, then gives up (S6). Nothing is ever overwritten.

A create whose reply is lost (a dropped connection, or a client retry answered 412 because the
first attempt had already landed) is settled by reading back the version file: our exact bytes
mean we won, another writer's bytes mean we lost, and anything else leaves the outcome unknown
(``CommitOutcomeUnknownError``). Callers delete the files a commit would reference only once the
commit is known to have lost (``CommitProgress``; S9).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from dataclasses import replace

from botocore.exceptions import BotoCoreError, ClientError
from pyiceberg.table import Table

from airflow_iceberg_maint import fencing
from airflow_iceberg_maint.errors import (
    CommitOutcomeUnknownError,
    IndexCommitConflictError,
    IndexExistsError,
    IndexNotFoundError,
    InvalidInputError,
    MetadataReadError,
    WriteRefusedError,
)
from airflow_iceberg_maint.fs.backends import table_storage
from airflow_iceberg_maint.fs.storage import SupportsConditionalWrites
from airflow_iceberg_maint.index.metadata.builders import index_root
from airflow_iceberg_maint.index.metadata.model import IndexMetadata, MetadataLogEntry, now_ms
from airflow_iceberg_maint.index.metadata.rules import (
    check_index_name,
    check_metadata,
    check_properties,
    is_valid_promotion,
    validate_against_table,
)

log = logging.getLogger(__name__)

METADATA_DIR = "metadata"
_VERSION_RE = re.compile(r"^(\d{5,})\.metadata\.json$")
BACKOFF_BASE_SECONDS = 0.02
BACKOFF_MAX_SECONDS = 2.0
RELOAD_ATTEMPTS = 3  # a listed version can vanish when a concurrent commit deletes old metadata
SETTLE_ATTEMPTS = 3  # read-backs of a version file whose create got no clear answer
#: What storage calls raise when the store is unreachable or answers with an error: botocore's
#: connection errors (EndpointConnectionError, ConnectionClosedError, ...) are neither OSError nor ClientError.
STORAGE_ERRORS: tuple[type[Exception], ...] = (OSError, ClientError, BotoCoreError)


class CommitProgress:
    """How far ``IndexStore.commit`` got, for a caller deciding what to clean up after it raised.

    ``in_doubt`` is set just before each exclusive create and cleared only once that create is
    known to have lost; ``committed`` is the location of the version that won. Whatever ends a
    commit (an error, a timeout, SIGTERM), files it would reference may be deleted only when
    ``may_have_committed`` is false.
    """

    def __init__(self) -> None:
        self.in_doubt = False
        self.committed: str | None = None

    @property
    def may_have_committed(self) -> bool:
        return self.in_doubt or self.committed is not None


def version_file_name(version: int) -> str:
    return f"{version:05d}.metadata.json"


def _check_definition_unchanged(base: IndexMetadata, updated: IndexMetadata, name: str) -> None:
    """An update may add extracts, schemas and keys, drop extracts, and change properties; nothing else."""
    fixed = ("format_version", "index_uuid", "table_uuid", "location", "index_type", "identity_fields", "ordering_key")
    for attr in fixed:
        if getattr(base, attr) != getattr(updated, attr):
            raise InvalidInputError(f"commit to index {name!r}: {attr.replace('_', '-')} is fixed at creation")
    if updated.schemas[: len(base.schemas)] != base.schemas:
        raise InvalidInputError(f"commit to index {name!r}: existing extract schemas cannot change")
    old_stats = {f.field_id: f for f in base.stats_fields}
    if set(old_stats) != {f.field_id for f in updated.stats_fields}:
        raise InvalidInputError(f"commit to index {name!r}: stats-fields cannot be added or removed")
    for f in updated.stats_fields:
        old = old_stats[f.field_id]
        if f.expr != old.expr or f.type != old.type or not is_valid_promotion(old.data_type, f.data_type):
            raise InvalidInputError(f"commit to index {name!r}: stats field {f.field_id} may only promote its type")
    old_extracts = {e.extract_id: e for e in base.extracts}
    for e in updated.extracts:
        if e.extract_id in old_extracts and old_extracts[e.extract_id] != e:
            raise InvalidInputError(f"commit to index {name!r}: extract {e.extract_id} is immutable")


class IndexStore:
    """The indexes of one table: discovery, loading, creation and atomic commits."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.table_location = table.metadata.location.rstrip("/")
        self.root = index_root(table.metadata)
        self.files: SupportsConditionalWrites = table_storage(self.root, table.io)

    def index_dir(self, name: str) -> str:
        return f"{self.root}/{check_index_name(name)}"

    def metadata_dir(self, name: str) -> str:
        return f"{self.index_dir(name)}/{METADATA_DIR}"

    def version_location(self, name: str, version: int) -> str:
        return f"{self.metadata_dir(name)}/{version_file_name(version)}"

    def versions(self, name: str) -> dict[int, str]:
        """Every metadata file of the index, by version number."""
        directory = self.metadata_dir(name)
        try:
            names, _ = self.files.list_names(directory)
        except STORAGE_ERRORS as exc:
            raise MetadataReadError(f"index directory {directory!r}: cannot be listed ({exc})") from exc
        found = ((_VERSION_RE.match(n), n) for n in names)
        return {int(m.group(1)): f"{directory}/{n}" for m, n in found if m}

    def names(self) -> list[str]:
        """Names of the table's indexes: directories under ``index/`` holding at least one metadata file."""
        try:
            _, dirs = self.files.list_names(self.root)
        except STORAGE_ERRORS as exc:
            raise MetadataReadError(f"index root {self.root!r}: cannot be listed ({exc})") from exc
        valid = []
        for name in sorted(dirs):
            try:
                check_index_name(name)
            except InvalidInputError:
                log.warning("ignoring %s/%s: not an index name", self.root, name)
                continue
            if self.versions(name):
                valid.append(name)
        return valid

    def read_metadata(self, location: str) -> IndexMetadata:
        """Read and check one metadata file against this table."""
        try:
            data = self.files.read(location)
        except FileNotFoundError:
            raise
        except STORAGE_ERRORS as exc:
            raise MetadataReadError(f"index metadata {location!r}: cannot be read ({exc})") from exc
        metadata = IndexMetadata.from_bytes(data, location)
        try:
            validate_against_table(metadata, self.table.metadata)
        except InvalidInputError as exc:
            raise InvalidInputError(f"index metadata {location}: {exc}") from exc
        return metadata

    def load(self, name: str) -> tuple[IndexMetadata, str, int]:
        """The current metadata of an index, its file location and its version number."""
        for _ in range(RELOAD_ATTEMPTS):
            versions = self.versions(name)
            if not versions:
                raise IndexNotFoundError(f"index {name!r}: table {self.table_location!r} has no such index")
            version = max(versions)
            try:
                metadata = self.read_metadata(versions[version])
            except FileNotFoundError:
                continue  # deleted by a newer commit's metadata clean-up: list again
            if metadata.location.rstrip("/") != self.index_dir(name):
                raise InvalidInputError(
                    f"index metadata {versions[version]}: location {metadata.location!r} is not the index directory"
                )
            return metadata, versions[version], version
        raise MetadataReadError(f"index {name!r}: its newest metadata file kept disappearing while being read")

    def create(self, metadata: IndexMetadata, name: str) -> str:
        """Write version 1 of a new index; fails cleanly if the index exists (even concurrently)."""
        if metadata.location.rstrip("/") != self.index_dir(name):
            raise InvalidInputError(f"index {name!r}: location {metadata.location!r} is not {self.index_dir(name)!r}")
        validate_against_table(metadata, self.table.metadata)
        if self.versions(name):
            raise IndexExistsError(f"index {name!r}: already exists on table {self.table_location!r}")
        location = self.version_location(name, 1)
        fencing.guard(f"the commit of index {name!r}")
        if not self._create_version(name, location, 1, metadata.to_bytes()):
            raise IndexExistsError(f"index {name!r}: already exists on table {self.table_location!r}")
        return location

    def commit(
        self,
        name: str,
        update: Callable[[IndexMetadata], IndexMetadata],
        max_attempts: int | None = None,
        progress: CommitProgress | None = None,
    ) -> tuple[IndexMetadata, str]:
        """Apply ``update`` to the current metadata and commit the result as the next version.

        On losing the race for the next version, re-read the winner and re-apply ``update`` to it
        (so ``update`` must be a pure function of its argument), up to ``max_attempts`` in all
        (default: the ``commit.retry.num-retries`` property + 1); then raise
        ``IndexCommitConflictError``. Exceptions from ``update`` abort without writing anything.
        When a create got no clear answer and reading back cannot settle it, raise
        ``CommitOutcomeUnknownError``. ``progress`` tells the caller, whatever was raised, whether
        the commit may have landed. A failed clean-up of old metadata after the commit is only logged.
        """
        if max_attempts is not None and max_attempts < 1:
            raise InvalidInputError(f"max_attempts: must be at least 1, got {max_attempts}")
        progress = progress if progress is not None else CommitProgress()
        attempt = 0
        while True:
            base, base_location, version = self.load(name)
            limit = max_attempts if max_attempts is not None else base.commit_num_retries() + 1
            new = self._next_metadata(name, base, base_location, update(base))
            location = self.version_location(name, version + 1)
            fencing.guard(f"the commit of index {name!r}")  # the run's lease, before each attempt (S15)
            progress.in_doubt = True  # from here until the create is known to have lost
            if self._create_version(name, location, version + 1, new.to_bytes()):
                progress.committed = location
                progress.in_doubt = False
                self._delete_dropped_metadata(base, base_location, new)
                return new, location
            progress.in_doubt = False
            attempt += 1
            log.info("index %s: version %d was committed concurrently (attempt %d)", name, version + 1, attempt)
            if attempt >= limit:
                raise IndexCommitConflictError(
                    f"index {name!r}: commit lost to concurrent writers {attempt} time(s); nothing was committed"
                )
            time.sleep(random.uniform(0, min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempt - 1))))

    def _create_version(self, name: str, location: str, version: int, data: bytes) -> bool:
        """Exclusive create of one version file: True when ours landed, False when another writer's did."""
        try:
            if self.files.create_exclusive(location, data):
                return True
        except PermissionError as exc:
            return self._refused(name, location, data, exc)
        except STORAGE_ERRORS as exc:
            log.warning("index %s: no reply to the create of %s (%s); reading it back", name, location, exc)
            return self._settle(name, location, version, data, exc)
        if not self.files.create_may_retry:
            return False
        # Taken: by another writer, or by our own first attempt when the client retried after losing its reply.
        return self._settle(name, location, version, data, None)

    def _refused(self, name: str, location: str, data: bytes, error: PermissionError) -> bool:
        """A create the store refused: nothing landed, unless an earlier attempt of the client's own
        retries did (then the file holds our bytes, or the winner's); read back once to be sure."""
        try:
            return self.files.read(location) == data
        except STORAGE_ERRORS:  # FileNotFoundError included: nothing landed
            pass
        raise WriteRefusedError(
            f"index {name!r}: the store refused to create {location} ({error.strerror or error}); nothing was "
            "committed. A table bucket (S3 Tables, SeaweedFS) accepts writes only under a table's metadata/, data/ "
            "and '_' folders: give the index a location outside them (index create --location)"
        ) from error

    def _settle(self, name: str, location: str, version: int, data: bytes, error: Exception | None) -> bool:
        """Decide a create with no clear answer by reading the version file back; raise when it cannot be told."""
        last: Exception | None = error
        for attempt in range(SETTLE_ATTEMPTS):
            if attempt:
                time.sleep(min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 4**attempt))
            try:
                found: bytes | None = self.files.read(location)
            except FileNotFoundError:
                found = None
            except STORAGE_ERRORS as exc:
                last = exc
                continue
            if found is not None:
                return found == data  # our exact bytes, or the winner's
            # Nothing there: our create did not land (yet). Sending it again is safe only while no
            # version at or after this one exists; otherwise this one was written and already
            # deleted by later commits, and by whom can no longer be told.
            try:
                taken = [v for v in self.versions(name) if v >= version]
            except MetadataReadError as exc:
                last = exc
                continue
            if taken:
                last = MetadataReadError(f"{location} is gone and version(s) {sorted(taken)} exist")
                break
            try:
                if self.files.create_exclusive(location, data):
                    return True
            except STORAGE_ERRORS as exc:
                last = exc
        raise CommitOutcomeUnknownError(
            f"index {name!r}: the commit of {location} may or may not have landed ({last}); the files it "
            "references are kept. Retry: the next run reads the index and sees which"
        )

    def _next_metadata(
        self, name: str, base: IndexMetadata, base_location: str, updated: IndexMetadata
    ) -> IndexMetadata:
        if not isinstance(updated, IndexMetadata):
            raise InvalidInputError(f"commit to index {name!r}: the update returned {type(updated).__name__}")
        _check_definition_unchanged(base, updated, name)
        keep = updated.previous_versions_max()
        log_entries = (*base.metadata_log, MetadataLogEntry(base_location, base.last_updated_ms))
        new = replace(
            updated,
            last_updated_ms=max(now_ms(), base.last_updated_ms + 1),
            metadata_log=log_entries[len(log_entries) - keep :] if keep else (),
        )
        check_metadata(new)
        check_properties(new)
        validate_against_table(new, self.table.metadata)
        return new

    def _delete_dropped_metadata(self, base: IndexMetadata, base_location: str, new: IndexMetadata) -> None:
        """With ``write.metadata.delete-after-commit.enabled``, delete files the log no longer lists."""
        if not new.delete_after_commit():
            return
        kept = {e.metadata_file for e in new.metadata_log}
        dropped = [e.metadata_file for e in base.metadata_log if e.metadata_file not in kept]
        if base_location not in kept:
            dropped.append(base_location)
        if dropped:
            fencing.guard(f"deleting old metadata of index {base.location!r}")
        for location in dropped:
            try:
                self.files.delete(location)
            except Exception as exc:
                # Any failure: the commit stands; a file left behind is removed later as an unreferenced index file.
                log.warning("index metadata %s: not deleted after commit (%s)", location, exc)
