"""Errors raised by the core library. Each names the bad input and what was expected (S7)."""


class MaintenanceError(Exception):
    """Base class: a maintenance action refused to run or could not finish.

    ``retryable`` says whether running the same action again may succeed: True for faults of
    the moment (an unreadable file, a store or catalog that did not answer, a lost race), False
    for bad input and refusals, which no retry can change.
    """

    retryable = False


class InvalidInputError(MaintenanceError, ValueError):
    """An argument, policy, path or expression is malformed; nothing was changed."""


class LocationRefusedError(InvalidInputError):
    """A scan location is not the table location or a path under it (S3)."""


class WriteRefusedError(LocationRefusedError):
    """The store refused (HTTP 403; no permission on a local disk) to create a file at a location.

    A definite answer, not an unknown outcome: nothing was written there, and no retry changes
    it. A table bucket (S3 Tables, SeaweedFS) accepts writes only under a table's ``metadata/``,
    ``data/`` and ``_`` folders, so an index of such a table needs a location outside them.
    """


class GcDisabledError(MaintenanceError):
    """The table has ``gc.enabled=false``: its files may be shared, so nothing may be deleted."""


class MetadataReadError(MaintenanceError):
    """A metadata, manifest list, manifest or index file could not be read (S2: fail closed)."""

    retryable = True


class IncompleteMetadataError(MetadataReadError):
    """The table's whole metadata file could not be had, or does not agree with what the catalog returned.

    Every snapshot and the whole metadata log are needed to know which files a table references: a
    catalog that returns fewer (a REST catalog's ``snapshot-loading-mode=refs``, a cache) would make
    the files of the snapshots it left out look unreferenced. So nothing runs on a partial view.
    """


class DamagedMetadataError(IncompleteMetadataError):
    """The table's metadata cannot be parsed (truncated, not JSON, a field missing or of the wrong type, a
    format-v1 snapshot listing its manifests inline): bad input, which no retry changes (a committed
    metadata file is never rewritten)."""

    retryable = False


class PrefixMismatchError(MaintenanceError):
    """Listed files match referenced files by path but not by scheme or authority; nothing was deleted.

    ``report`` is the run's report (an ``OrphanReport``), conflicts included.
    """

    def __init__(self, message: str, conflicts: list[tuple[str, str]], report: object = None) -> None:
        super().__init__(message)
        self.conflicts = conflicts
        self.report = report


class TableNotFoundError(InvalidInputError):
    """The catalog has no such table."""


class CommitOutcomeUnknownError(MaintenanceError):
    """A metadata commit was sent but whether it landed could not be established.

    The files the commit would reference are kept (they may be live); a retry re-reads the
    metadata and finds out, and files of a commit that in fact lost are removed later as
    unreferenced files.
    """

    retryable = True


class UnsupportedStoreError(InvalidInputError):
    """The store of a location lacks a capability the action needs; refused before anything is listed."""


class StorageError(MaintenanceError):
    """Object storage or the state store's database could not be reached or refused a request after the
    client's retries."""

    retryable = True


class CatalogListingError(MaintenanceError):
    """The catalog's tables could not be listed, so tables nested under a scan location are unknown."""

    retryable = True


class UnknownLocationsError(MaintenanceError):
    """Another table of the catalog may write anywhere (a location provider of its own): nothing may be deleted."""


class IndexNotFoundError(InvalidInputError):
    """The table has no index of that name."""


class IndexExistsError(InvalidInputError):
    """``create`` found an index of that name already."""


class IndexCommitConflictError(MaintenanceError):
    """Every commit attempt lost to a concurrent writer; nothing was committed."""

    retryable = True


class ExpiryConflictError(MaintenanceError):
    """Every expiry commit found a ref moved by a concurrent writer; nothing was committed or deleted."""

    retryable = True


class ExpiryRestoreError(MaintenanceError):
    """A commit that landed during the expiry needed something the expiry removed, and it could not be put
    back (as it was, or on a v2 table as a same-content copy); nothing was deleted, and the message names the
    metadata file that still holds it and how to put it back."""


class TableBusyError(MaintenanceError):
    """Another maintenance task held the table's lease for longer than this task would wait."""

    retryable = True


class LeaseLostError(TableBusyError):
    """The run's lease was taken by another run, or may have expired: the run stopped before its next
    delete batch or commit (S15). Like ``TableBusyError``, another run holds the table: try again later."""


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters), for a one-line error naming its cause."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__
