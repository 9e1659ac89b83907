"""The layers of ``src/airflow_iceberg_maint`` (docs/design.md, "Layers"): a package imports only those below it.

Each top-level package or module of the project belongs to one layer. It may import any package of a
layer below its own, and, within its layer, only the packages ``SIDEWAYS`` names: so ``reachability``
imports nothing of the engines that use it, ``state`` nothing of the policies or engines that write it,
and the engines nothing of the policies, the API, the command line or the Airflow layer; ``reachability``
and ``state`` are held to fewer imports still (``NARROWER``). Apache Airflow
itself is imported only by the ``airflow`` package (the core never imports it), and by the command line
only there where it opens a catalog from an Airflow connection. Inside ``orphans``, the listing imports
nothing else of the orphan engine, and nothing but the sharded scan imports the sharded scan.

Imports are read with ``ast`` (those inside functions and ``TYPE_CHECKING`` blocks included); nothing is imported.
"""

from __future__ import annotations

import ast
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "airflow_iceberg_maint"

#: The layers, bottom first. ``airflow_iceberg_maint`` is the package's own ``__init__`` (the public API's names).
LAYERS: list[tuple[str, set[str]]] = [
    (
        "base",
        {
            "errors",
            "progress",
            "fencing",
            "quiet_threads",
            "parent_watch",
            "pyiceberg_compat",
            "load_errors",
            "metadata_check",
            "reviewed_table",
        },
    ),
    ("storage", {"fs", "catalog", "commit_fence", "sorting"}),
    ("reachability and state", {"reachability", "state"}),
    ("engines", {"orphans", "index", "expiry", "health", "compaction"}),
    ("planning", {"policy"}),
    ("interfaces", {"api", "cli", "airflow", "provider_info", ROOT}),
]
#: The imports allowed within a layer: importer -> imported.
SIDEWAYS: dict[str, set[str]] = {
    "load_errors": {"errors"},
    "metadata_check": {"errors"},
    "reviewed_table": {"errors"},
    "fs": {"errors", "fencing", "progress", "pyiceberg_compat"},
    "catalog": {"fs"},
    "commit_fence": {"catalog"},
    # Expiry keeps the snapshots the index pins and refuses gc.enabled=false tables as orphan removal does.
    "expiry": {"index", "orphans"},
    # Health counts what the default expiry would free with the expiry's own planning.
    "health": {"expiry", "index", "orphans"},
    # Compaction applies deletes with the index engine's readers of live rows.
    "compaction": {"index"},
    # The command line opens a catalog from an Airflow connection (--conn-id) and prints the version.
    "cli": {"api", "airflow", ROOT},
    "airflow": {"api", "provider_info"},
    "provider_info": {ROOT},
    ROOT: {"api"},
}
#: Packages held to fewer imports than their layer allows: what a table references needs no catalog, and the
#: state needs neither storage nor catalog.
NARROWER: dict[str, set[str]] = {
    "reachability": {"errors", "fs", "parent_watch", "progress", "pyiceberg_compat", "sorting"},
    "state": {"errors", "fencing", "quiet_threads"},
}
#: Within the orphan engine: each part and the other parts it may import (its top-level modules are ``.``).
ORPHANS = {"listing": set(), ".": {"listing"}, "sharded": {".", "listing"}}
#: The only places that may import Apache Airflow: the Airflow layer, and the command line's --conn-id.
AIRFLOW_IMPORTERS = {"airflow", "cli"}


def _modules() -> Iterator[tuple[list[str], Path]]:
    """Every module of the project: its dotted name's parts (a package by its ``__init__.py``) and its file."""
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        yield (parts[:-1] if parts[-1] == "__init__" else parts), path


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Every dotted name a module imports (``from a.b import c``: ``a.b.c``), with its line."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import (the project imports absolutely)"
            yield from ((f"{node.module}.{alias.name}", node.lineno) for alias in node.names)


def _own(name: str) -> str | None:
    """The project's top-level package or module a dotted name is in (the package's own names: ``ROOT``)."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    if len(parts) == 1 or not ((SRC / ROOT / parts[1]).is_dir() or (SRC / ROOT / f"{parts[1]}.py").is_file()):
        return ROOT
    return parts[1]


def layer_violations() -> list[str]:
    """Every import that crosses the layers the wrong way, as ``path:line: importer imports imported``."""
    layer_of = {package: n for n, (_, packages) in enumerate(LAYERS) for package in packages}
    wrong = []
    for parts, path in _modules():
        importer = parts[1] if len(parts) > 1 else ROOT
        for name, line in _imports(path):
            imported = _own(name)
            where = f"{path.relative_to(SRC)}:{line}"
            if imported is None:
                if name.split(".")[0] == "airflow" and importer not in AIRFLOW_IMPORTERS:
                    wrong.append(f"{where}: {importer} imports Apache Airflow ({name})")
                continue
            if imported == importer:
                continue
            if importer not in layer_of or imported not in layer_of:
                wrong.append(f"{where}: {importer} or {imported} is in no layer of LAYERS")
            elif layer_of[imported] > layer_of[importer] or (
                layer_of[imported] == layer_of[importer] and imported not in SIDEWAYS.get(importer, set())
            ):
                wrong.append(f"{where}: {importer} ({LAYERS[layer_of[importer]][0]}) imports {name}")
            elif importer in NARROWER and imported not in NARROWER[importer]:
                wrong.append(f"{where}: {importer} imports {name}, not one of {sorted(NARROWER[importer])}")
    return wrong


def _orphans_part(parts: list[str]) -> str:
    """The part of the orphan engine a name of it is in: a subpackage, or ``.`` for its top-level modules."""
    return parts[2] if len(parts) > 2 and (SRC / ROOT / "orphans" / parts[2]).is_dir() else "."


def orphans_violations() -> list[str]:
    wrong = []
    prefix = f"{ROOT}.orphans"
    for parts, path in _modules():
        if parts[:2] != [ROOT, "orphans"] or len(parts) == 2:
            continue
        importer = _orphans_part(parts)
        for name, line in _imports(path):
            if not name.startswith(f"{prefix}."):
                continue
            imported = _orphans_part(name.split("."))
            if imported != importer and imported not in ORPHANS[importer]:
                wrong.append(f"{path.relative_to(SRC)}:{line}: orphans/{importer} imports {name}")
    return wrong


def test_every_package_is_in_one_layer() -> None:
    listed = [package for _, packages in LAYERS for package in packages]
    on_disk = {p.name for p in (SRC / ROOT).iterdir() if (p / "__init__.py").is_file()}
    on_disk |= {p.stem for p in (SRC / ROOT).glob("*.py") if p.name != "__init__.py"}
    assert sorted(listed) == sorted(on_disk | {ROOT})
    orphan_parts = {p.name for p in (SRC / ROOT / "orphans").iterdir() if (p / "__init__.py").is_file()}
    assert orphan_parts | {"."} == set(ORPHANS)


def test_each_package_imports_only_the_layers_below_its_own() -> None:
    wrong = layer_violations()
    assert not wrong, "imports across the layers the wrong way:\n" + "\n".join(wrong)


def test_the_orphan_engine_s_listing_and_sharded_scan_import_one_way() -> None:
    wrong = orphans_violations()
    assert not wrong, "imports inside orphans/ the wrong way:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("module", "line", "found"),
    [
        ("reachability/cutoff.py", "from airflow_iceberg_maint.orphans import removal", "reachability"),
        ("state/leases.py", "from airflow_iceberg_maint.policy.policies import Policy", "state"),
        ("orphans/removal.py", "import airflow.sdk", "Apache Airflow"),
        ("index/__init__.py", "from airflow_iceberg_maint.expiry.run import expire_snapshots", "index"),
        ("state/cleanup.py", "from airflow_iceberg_maint.catalog import load_table", "state"),
        (
            "orphans/listing/candidates.py",
            "from airflow_iceberg_maint.orphans.settling import settle",
            "orphans/listing",
        ),
        ("orphans/removal.py", "from airflow_iceberg_maint.orphans.sharded.scan import run_shard", "orphans/."),
    ],
)
def test_a_planted_import_the_wrong_way_is_found(
    module: str, line: str, found: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A copy of the tree with one import the wrong way added fails the check, naming the importer."""
    copy = tmp_path / "src"
    shutil.copytree(SRC / ROOT, copy / ROOT, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / ROOT / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "SRC", copy)
    wrong = layer_violations() + orphans_violations()
    assert len(wrong) == 1 and module in wrong[0] and found in wrong[0], wrong
