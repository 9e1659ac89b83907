"""Path identity and scan-location validation.

Two rules keep deletes safe:
- a listed file is referenced only when its exact string is referenced; normalised forms
  (scheme aliases, authority aliases, host case, the path percent-decoded with ``//``, ``.`` and
  ``..`` resolved: ``path_key``) are used only to *protect* a file or to report a conflict,
  never to make a file deletable (S4);
- where two paths meet to decide whether one lies under the other (other tables' locations,
  S8), both go through ``PathEquivalence.identities``: every form a store may take for the same
  object is compared, so another spelling can only keep a file, never expose it;
- a scan location must be the table location or a path under it, checked on the raw and
  on the percent-decoded form, before anything is listed (S3); on local disks an absolute
  table location, and a scan location that reaches no symlink below the table location.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from airflow_iceberg_maint.errors import InvalidInputError, LocationRefusedError

# Schemes that name the same stores: Hadoop's S3 connectors, pyiceberg's GCS alias, and the
# four spellings of Azure storage (ADLS Gen2 and Blob, with or without TLS).
DEFAULT_EQUAL_SCHEMES: Mapping[str, str] = {
    "s3a": "s3",
    "s3n": "s3",
    "gcs": "gs",
    "abfss": "abfs",
    "wasb": "abfs",
    "wasbs": "abfs",
}
AZURE_SCHEME = "abfs"  # what every Azure scheme maps to
LOCAL_SCHEMES = frozenset({"", "file"})
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# An Azure account's Blob and Data Lake endpoints name the same objects.
_AZURE_BLOB_HOST_RE = re.compile(r"\.blob\.core\.")

#: A path as the stores see it: (scheme, authority, path segments), after every alias is mapped.
Identity = tuple[str, str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Uri:
    """A path split into scheme, authority and path, without decoding anything."""

    scheme: str
    authority: str
    path: str

    @classmethod
    def parse(cls, text: str) -> Uri:
        match = _SCHEME_RE.match(text)
        if not match:
            return cls("", "", text)
        scheme = match.group(1).lower()
        rest = text[match.end() :]
        if rest.startswith("//"):
            rest = rest[2:]
            slash = rest.find("/")
            if slash < 0:
                return cls(scheme, rest, "")
            return cls(scheme, rest[:slash], rest[slash:])
        return cls(scheme, "", rest)

    @property
    def is_local(self) -> bool:
        return self.scheme in LOCAL_SCHEMES


def parse_equivalence_map(text: str) -> dict[str, str]:
    """An ``equal_schemes`` / ``equal_authorities`` map written as ``a=b,c=d``."""
    result: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = pair.partition("=")
        if not eq or not key.strip() or not value.strip():
            raise InvalidInputError(f"expected key=value pairs separated by commas, got {text!r}")
        result[key.strip()] = value.strip()
    return result


def _flatten(mapping: Mapping[str, str] | None) -> dict[str, str]:
    """Expand comma-separated keys (``"s3a,s3n": "s3"``), as Iceberg does."""
    flat: dict[str, str] = {}
    for keys, value in (mapping or {}).items():
        for key in str(keys).split(","):
            if key.strip():
                flat[key.strip()] = str(value).strip()
    return flat


@dataclass(frozen=True)
class PathEquivalence:
    """Which spellings of a path name the same file. User maps merge on top of the defaults."""

    equal_schemes: Mapping[str, str] = field(default_factory=dict)
    equal_authorities: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        schemes = {**DEFAULT_EQUAL_SCHEMES, **_flatten(self.equal_schemes)}
        object.__setattr__(self, "equal_schemes", {k.lower(): v.lower() for k, v in schemes.items()})
        object.__setattr__(self, "equal_authorities", _flatten(self.equal_authorities))

    def scheme(self, scheme: str) -> str:
        scheme = scheme.lower()
        if scheme in LOCAL_SCHEMES:
            return "file"
        return self.equal_schemes.get(scheme, scheme)

    def authority(self, authority: str) -> str:
        """The authority after the user's map, in lower case (host names are), an Azure Blob host as its DFS host."""
        mapped = self.equal_authorities.get(authority, authority).lower()
        return _AZURE_BLOB_HOST_RE.sub(".dfs.core.", mapped)

    @staticmethod
    def path_key(path: str) -> str:
        """The path component as any store may resolve it: the decoded identity of ``identities``.

        Percent-decoded, empty and ``.`` segments dropped, ``..`` resolved. The one key every
        comparison of a listed file with a referenced path uses: two spellings with one key are
        the same file or a conflict, so they can only keep a file (S4).
        """
        return "/" + "/".join(_decoded_segments(Uri.parse(path).path))

    def identities(self, path: str) -> tuple[Identity, ...]:
        """Every identity a store may give ``path``: the literal one, and the percent-decoded one with ``..`` resolved.

        Wider than ``equivalent`` on purpose, for keeping files only: an Azure authority is its
        container alone (the account's host is folded away), and a local ``file://host/p`` is
        ``host/p`` (as pyiceberg opens it).
        """
        uri = Uri.parse(path)
        scheme, authority, raw = self.scheme(uri.scheme), self.authority(uri.authority), uri.path
        if scheme == "file" and authority:
            raw, authority = f"/{uri.authority}{raw}", ""
        elif scheme == AZURE_SCHEME:
            authority = authority.partition("@")[0]
        literal = tuple(s for s in raw.split("/") if s not in ("", "."))
        decoded = _decoded_segments(raw)
        if decoded == literal:
            return ((scheme, authority, literal),)
        return (scheme, authority, literal), (scheme, authority, decoded)

    def equivalent(self, listed: str, referenced: str) -> bool:
        """Whether a listed file and a referenced path are the same file under another spelling.

        A referenced path with no scheme or no authority matches any (as Iceberg Java does).
        """
        a, b = Uri.parse(listed), Uri.parse(referenced)
        if self.path_key(listed) != self.path_key(referenced):
            return False
        if b.scheme and self.scheme(a.scheme) != self.scheme(b.scheme):
            return False
        return not b.authority or self.authority(a.authority) == self.authority(b.authority)


def _decoded_segments(path: str) -> tuple[str, ...]:
    """Segments of the percent-decoded path, empty and ``.`` ones dropped and ``..`` resolved
    (one above the root stays at the root)."""
    stack: list[str] = []
    for part in unquote(path).split("/"):
        if part == "..":
            if stack:
                stack.pop()
        elif part not in ("", "."):
            stack.append(part)
    return tuple(stack)


class LocationSet:
    """Locations compared by identity: a path is covered when it lies at or under any of them, in any spelling.

    Each side is taken in every identity ``PathEquivalence.identities`` gives it, so a file that
    one spelling puts under a location and another does not is covered.
    """

    def __init__(self, locations: Iterable[str], equivalence: PathEquivalence) -> None:
        self.equivalence = equivalence
        self._identities = {i for location in locations for i in equivalence.identities(location)}
        self._depths = sorted({len(segments) for _, _, segments in self._identities})

    def __bool__(self) -> bool:
        return bool(self._identities)

    def covers(self, path: str) -> bool:
        known = self._identities
        for scheme, authority, segments in self.equivalence.identities(path):
            for depth in self._depths:
                if depth > len(segments):
                    break
                if (scheme, authority, segments[:depth]) in known:
                    return True
        return False


def _segments(path: str, what: str, original: str) -> list[str]:
    """Resolve ``.``, ``..`` and empty segments; refuse a ``..`` that climbs above the root."""
    stack: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                raise LocationRefusedError(f"location {original!r}: '..' climbs above the {what} root")
            stack.pop()
        else:
            stack.append(part)
    return stack


def _refuse(location: str, table_location: str, why: str) -> LocationRefusedError:
    return LocationRefusedError(
        f"location {location!r}: {why}; expected the table location {table_location!r} or a path under it"
    )


def validate_location(
    location: str | None,
    table_location: str,
    equivalence: PathEquivalence | None = None,
) -> str:
    """Return the location to scan, spelled like the table location, or raise ``LocationRefusedError``.

    The one validation used by the job-configuration layer and again by execution (S3).
    """
    equivalence = equivalence or PathEquivalence()
    requested = table_location if location is None or location.strip() == "" else location.strip()
    if any(ch in requested for ch in "?#") or any(ord(ch) < 32 for ch in requested):
        raise _refuse(requested, table_location, "contains a query, fragment or control character")
    root, want = Uri.parse(table_location), Uri.parse(requested)
    if equivalence.scheme(want.scheme) != equivalence.scheme(root.scheme):
        raise _refuse(requested, table_location, f"scheme {want.scheme or 'file'!r} differs")
    if equivalence.authority(want.authority) != equivalence.authority(root.authority):
        raise _refuse(requested, table_location, f"authority {want.authority!r} differs")

    if root.is_local and (root.authority or not root.path.startswith("/")):
        raise LocationRefusedError(
            f"table location {table_location!r}: is not an absolute local path, so the files it names depend on the "
            "working directory of each reader; register the table with an absolute location"
        )
    root_segments = _segments(root.path, "table", table_location)
    relative: list[str] | None = None
    # Check the literal form and the percent-decoded form: both must stay inside (%2E%2E, %2F).
    for decode in (False, True):
        want_path = unquote(want.path) if decode else want.path
        root_path = unquote(root.path) if decode else root.path
        base = _segments(root_path, "table", table_location)
        segments = _segments(want_path, "bucket" if not root.is_local else "filesystem", requested)
        if segments[: len(base)] != base:
            raise _refuse(requested, table_location, "is not under the table location")
        if relative is None:
            relative = segments[len(base) :]
    if not root_segments:
        raise _refuse(requested, table_location, "is a bucket or filesystem root")

    scan = table_location.rstrip("/") + ("/" + "/".join(relative) if relative else "")
    if root.is_local:
        _check_symlinks(scan, table_location, requested)
    return scan


def local_path(uri: str) -> str:
    """The filesystem path of a local URI (``file:///x`` or ``/x``)."""
    parsed = Uri.parse(uri)
    if not parsed.is_local:
        raise ValueError(f"{uri!r} is not a local path")
    return parsed.path


def _check_symlinks(scan: str, table_location: str, requested: str) -> None:
    """Below the table location, the scan location must be spelled as it lies on disk.

    Listing through a symlink would spell live files in a way no referenced path does.
    """
    real_root = os.path.realpath(local_path(table_location))
    real_scan = os.path.realpath(local_path(scan))
    relative = os.path.relpath(os.path.normpath(local_path(scan)), os.path.normpath(local_path(table_location)))
    expected = real_root if relative == "." else os.path.join(real_root, relative)
    if real_scan != expected:
        why = f"resolves through a symlink to {real_scan!r}; give the path as it lies on disk"
        raise _refuse(requested, table_location, why)
