"""One path key for every comparison of a listed file with the table's own referenced paths (S4).

Whatever spelling a writer used for a referenced path (percent-encoding, ``//``, ``.`` and ``..``
segments, a trailing ``/``, a scheme alias, a host in capitals), the listed file under another
spelling of it is never left unclassified: it is kept as ``equivalent`` or reported as a
``conflict``. The same key is the one ``PathEquivalence.identities`` gives other tables' paths.
"""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from airflow_iceberg_maint.fs.locations import PathEquivalence
from airflow_iceberg_maint.reachability.path_hashes import PathHasher
from airflow_iceberg_maint.reachability.referenced import ReferencedSet

# Names without "%": a store decodes a path once, so "%" itself has no second spelling here.
NAMES = st.text(alphabet="abcXYZ09=_- +.é", min_size=1, max_size=6).filter(lambda n: n not in (".", ".."))
HEADS = {
    # A local path: with the scheme, or unqualified as some writers record it (matches any head).
    "local": ("file://", "file://", ""),
    "s3": ("s3://bucket", "s3a://bucket", "s3n://BUCKET"),
    "gs": ("gs://bucket", "gcs://bucket", "gs://Bucket"),
    "abfs": (
        "abfss://c@acct.dfs.core.windows.net",
        "wasbs://c@acct.blob.core.windows.net",
        "abfs://c@ACCT.dfs.core.windows.net",
    ),
}


@st.composite
def respelled(draw: st.DrawFn, segments: list[str]) -> str:
    """The same path component under a random mix of the spellings a writer or store may use."""
    out = []
    for name in segments:
        if draw(st.booleans()):
            name = quote(name, safe=draw(st.sampled_from(["", "=", "+", "-_"])))
        out.append(name)
        if draw(st.integers(0, 5)) == 0:
            out.append(".")
        if draw(st.integers(0, 5)) == 0:
            out.extend([draw(NAMES), ".."])
    path = "/" + "/".join(out)
    if draw(st.booleans()):
        path = path.replace("/", "//", 1)
    return path + ("/" if draw(st.integers(0, 4)) == 0 else "")


def classified(referenced: str, listed: str) -> str | None:
    refs = ReferencedSet(PathEquivalence())
    refs.add([referenced, "s3://bucket/t/data/unrelated.parquet"])
    assert refs.contains_exact([listed]) == [listed == referenced]
    return refs.classify_unmatched([listed]).get(listed)


@given(
    store=st.sampled_from(sorted(HEADS)),
    role=st.sampled_from(["data", "metadata", "index"]),
    segments=st.lists(NAMES, min_size=1, max_size=4),
    data=st.data(),
)
def test_every_spelling_of_a_referenced_path_keeps_the_listed_file(
    store: str, role: str, segments: list[str], data: st.DataObject
) -> None:
    """Any store, any role of the path (data and delete files, metadata, index files)."""
    canonical = f"/t/{role}/" + "/".join(segments)
    head, other_head = data.draw(st.permutations(HEADS[store]))[:2]
    if not other_head:  # the listing always spells the scheme
        head, other_head = other_head, head or "file://"
    spelled = data.draw(respelled(["t", role, *segments]))
    for referenced, listed in ((head + spelled, other_head + canonical), (head + canonical, other_head + spelled)):
        if listed == referenced:
            continue
        assert classified(referenced, listed) == "equivalent", (referenced, listed)


@given(segments=st.lists(NAMES, min_size=1, max_size=4), data=st.data())
def test_the_hashers_fast_and_slow_keys_agree(segments: list[str], data: st.DataObject) -> None:
    """Keys hashed a chunk at a time in C equal those hashed a path at a time, whatever the spelling."""
    paths = ["s3://bucket" + data.draw(respelled(["t", *segments])) for _ in range(3)]
    fast = PathHasher(PathEquivalence()).key_hashes(paths)[0]
    assert list(fast) == [PathHasher(PathEquivalence()).key(p) for p in paths]
    keys = {PathEquivalence.path_key(p) for p in paths}
    assert keys == {"/t/" + "/".join(segments)}
