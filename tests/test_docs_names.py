"""Every name a document gives exists: module paths, files, operator/sensor/trigger classes and DAG ids.

The documents are README.md, CONTRIBUTING.md and docs/*.md (docs/benchmarks/history.md is a journal
of past runs and keeps the names of its day). Files are read and parsed (``ast``); nothing is imported
from Airflow, so this runs in a second.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests.test_docs import ROOT, airflow_reference, operator_docs

DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

# Classes of other packages that the documents name, and where they come from.
EXTERNAL_CLASSES = {
    "BaseOperator": "airflow.sdk",
    "BaseSensorOperator": "airflow.sdk",
    "BaseEventTrigger": "airflow.triggers.base",
    "ApprovalOperator": "apache-airflow-providers-standard (hitl)",
    "HITLOperator": "apache-airflow-providers-standard (hitl)",
    "HITLBranchOperator": "apache-airflow-providers-standard (hitl)",
    "HITLEntryOperator": "apache-airflow-providers-standard (hitl)",
    "IcebergTableSnapshotTrigger": "apache-airflow-providers-apache-iceberg",
}
# Files of other projects that the documents name.
EXTERNAL_FILES = {"moto/s3/models.py"}

_MODULE = re.compile(r"\bairflow_iceberg_maint(?:\.[A-Za-z_]\w*)+")
_IMPORT = re.compile(r"^\s*from (airflow_iceberg_maint[\w.]*) import ([\w, ]+)")
# A path of the repository, not an absolute one (`/opt/airflow/dags/...` is a deployment's) nor a property
# (`write.py-location-provider.impl`).
_FILE = re.compile(r"(?<![\w*./:-])((?:[\w*-]+/)*[\w*-]+\.(?:py|yaml|sh))(?![\w-])")
_CLASS = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Operator|Sensor|Trigger)\b")
_DAG_COMMAND = re.compile(r"airflow dags (?:trigger|test|unpause|pause|list-runs)\s+(?:-\w+\s+\S+\s+)*([\w.-]+)")
_DAG_PROSE = re.compile(r"(?:\bDAGs? `(\w+)`|`(\w+)` (?:sample )?DAG\b)")
_ICEBERG_NAME = re.compile(r"`(iceberg_[a-z0-9_]+)`")
_DOTTED_SPAN = re.compile(r"`([a-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
PACKAGE = ROOT / "src" / "airflow_iceberg_maint"
_EXTENSIONS = {"py", "md", "yaml", "json", "cfg", "toml", "txt", "sh"}  # a file name, checked as a file
# pyiceberg's FileIO properties (`s3.signer`, `gcs.oauth2.token`) share their first part with modules of fs/.
_FILEIO_PROPERTY_PREFIXES = {"s3", "gcs", "adls"}


_SRC = ROOT / "src"


def _module_file(dotted: str) -> Path | None:
    base = _SRC.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """What a module or class body defines: classes, functions, assigned and imported names."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, ast.If):
            # Names defined under a condition: the package's API, imported under ``if TYPE_CHECKING:`` and
            # loaded on first use, is among them.
            names.update(_top_level_names(node.body))
    return names


def resolves(dotted: str) -> bool:
    """Whether ``package.module.Name[.member]`` names a module of src/ and something it defines (read with ``ast``)."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:split]))
        if path is None:
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        for name in parts[split:]:
            node = _top_level_names(body).get(name)
            if node is None:
                return False
            body = node.body if isinstance(node, ast.ClassDef) else []
        return True
    return False


@functools.cache
def _repository_files() -> tuple[str, ...]:
    """Every file of the repository, relative, as POSIX paths (no .git, no virtualenv, no caches)."""
    skipped = {".git", ".venv", ".ruff_cache", ".mypy_cache", ".services", ".demo", "node_modules", "__pycache__"}
    return tuple(
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*")
        if p.is_file() and not skipped & set(p.relative_to(ROOT).parts)
    )


@functools.cache
def _code_text() -> str:
    """The source of the package, the DAGs, the scripts and the benchmarks (where a real name appears)."""
    paths = [p for folder in ("src", "dags", "scripts", "bench") for p in (ROOT / folder).rglob("*.py")]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


@functools.cache
def _modules() -> tuple[str, ...]:
    """Dotted names of the package's modules and packages: ``airflow_iceberg_maint.index.write.build``."""
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return tuple(names)


@functools.cache
def _quoted_in_code() -> str:
    """The code's and pyproject's text, where a property or entry-point group (`s3.endpoint`,
    `write.index.path`, `airflow.plugins`) appears quoted."""
    return _code_text() + (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def relative_module(span: str) -> bool | None:
    """Whether a dotted name relative to a package of this project (`write.build.regions_of`,
    `fs.backends.table_storage`) names a module and what it defines; None when it is not such a name:
    its first part names no module of the package, or it is a property the code spells in quotes."""
    parts = span.split(".")
    if parts[-1] in _EXTENSIONS or parts[0] in _FILEIO_PROPERTY_PREFIXES:
        return None
    if not any(m.endswith("." + parts[0]) for m in _modules()):
        return None
    if re.search(rf"[\"']{re.escape(span)}[\"']", _quoted_in_code()):
        return None
    for k in range(len(parts), 0, -1):
        prefix = "." + ".".join(parts[:k])
        rest = "".join("." + part for part in parts[k:])
        found = [m for m in _modules() if m.endswith(prefix)]
        if found:
            return any(resolves(m + rest) for m in found)
    return False


def dag_ids() -> set[str]:
    return {dag.dag_id for dag in airflow_reference.dags()}


def file_exists(named: str) -> bool:
    """A path a document gives names a file of the repository: the whole path from the root, or its tail
    (``orphans/removal.py`` for ``src/airflow_iceberg_maint/orphans/removal.py``); ``*`` as in a shell."""
    if named in EXTERNAL_FILES:
        return True
    pattern = re.compile(r"(?:^|.*/)" + re.escape(named).replace(r"\*", r"[^/]*") + r"$")
    return any(pattern.match(path) for path in _repository_files())


def dangling_names(text: str) -> list[tuple[int, str]]:
    """(line, what) for each module path, file, class or DAG id of ``text`` that does not exist."""
    classes = {c.name for c in operator_docs.public_classes(operator_docs.collect())}
    dags = dag_ids()
    code = _code_text()
    wrong: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        wrong += [(number, f"module {m}") for m in _MODULE.findall(line) if not resolves(m)]
        imported = _IMPORT.match(line)
        if imported:
            names = [f"{imported.group(1)}.{n.strip()}" for n in imported.group(2).split(",") if n.strip()]
            wrong += [(number, f"import {n}") for n in names if not resolves(n)]
        relative = [s for s in _DOTTED_SPAN.findall(line) if not s.startswith("airflow_iceberg_maint.")]
        wrong += [(number, f"module {s}") for s in relative if relative_module(s) is False]
        wrong += [(number, f"file {f}") for f in _FILE.findall(line) if not file_exists(f)]
        wrong += [(number, f"class {c}") for c in _CLASS.findall(line) if c not in classes | set(EXTERNAL_CLASSES)]
        named_dags = _DAG_COMMAND.findall(line) + [a or b for a, b in _DAG_PROSE.findall(line)]
        wrong += [(number, f"DAG {d}") for d in named_dags if d not in dags]
        # Any other `iceberg_...` name (a pool, a connection, a table, a DAG) appears in the code.
        for name in _ICEBERG_NAME.findall(line):
            if name not in dags and name not in named_dags and not re.search(rf"\b{name}\b", code):
                wrong.append((number, f"name {name}"))
    return wrong


def test_the_checker_finds_each_kind_of_dangling_name() -> None:
    page = "\n".join(
        [
            "`airflow_iceberg_maint.orphans.removal.remove_orphan_files`, `airflow_iceberg_maint.orphans.gone`",
            "`src/airflow_iceberg_maint/orphans/removal.py`, `orphans/removal.py`, `tests/airflow/test_index_*.py`",
            "`write.build`, `fs.backends.table_storage`, `format.ordering`, `write.index.path`, `s3.signer`",
            "`orphans/removed.py`, bench/nothing.py, not /opt/dags/x.yaml nor `write.py-location-provider.impl`",
            "`IcebergRemoveOrphanFilesOperator`, `ApprovalOperator`, `IcebergRemoveOrphansOperator`",
            "`operators.index.IcebergCreateMissingIndexesOperator` `operators.index.IcebergCommitIndexExtractOperator`",
            "from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor, IcebergIndexLagSensor",
            "the DAG `iceberg_orphan_cleanup_manual`; the `iceberg_orphan_cleanup_daily` DAG",
            "airflow dags trigger iceberg_orphan_cleanup_manual -c '{}'; airflow dags test iceberg_gone",
            "the pool `iceberg_maint`, the connection `iceberg_default`, `iceberg_maint_nothing`, `airflow.cfg`",
        ]
    )
    assert dangling_names(page) == [
        (1, "module airflow_iceberg_maint.orphans.gone"),
        (3, "module format.ordering"),
        (4, "file orphans/removed.py"),
        (4, "file bench/nothing.py"),
        (5, "class IcebergRemoveOrphansOperator"),
        (6, "module operators.index.IcebergCreateMissingIndexesOperator"),
        (7, "import airflow_iceberg_maint.airflow.sensors.due.IcebergIndexLagSensor"),
        (8, "DAG iceberg_orphan_cleanup_daily"),
        (9, "DAG iceberg_gone"),
        (10, "name iceberg_maint_nothing"),
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_file_class_and_dag_a_document_names_exists(document: Path) -> None:
    wrong = [f"{document.name}:{n}: {what}" for n, what in dangling_names(document.read_text(encoding="utf-8"))]
    assert not wrong, "named in the document, not in the repository:\n" + "\n".join(wrong)
