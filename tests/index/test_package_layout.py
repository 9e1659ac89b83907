"""The packages of ``index/`` import one way: each only the ones before it (``index/__init__.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_iceberg_maint.index

INDEX = Path(airflow_iceberg_maint.index.__file__).parent
PREFIX = "airflow_iceberg_maint.index"
#: Each package and the index packages it may import; write and read are both last, apart.
ALLOWED = {
    "metadata": set(),
    "format": {"metadata"},
    "source": {"metadata", "format"},
    "lifecycle": {"metadata", "format", "source"},
    "write": {"metadata", "format", "source", "lifecycle"},
    "read": {"metadata", "format", "source", "lifecycle"},
}


def _imported_packages(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            modules = [f"{node.module}.{a.name}" for a in node.names] if node.module == PREFIX else [node.module]
            found.update(m.split(".")[2] for m in modules)
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith(f"{PREFIX}."))
    return found


def test_every_module_is_in_a_package_and_imports_only_the_packages_before_its_own() -> None:
    assert sorted(p.name for p in INDEX.glob("*.py")) == ["__init__.py"]
    packages = {p.name for p in INDEX.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED)
    wrong = {
        f"{path.relative_to(INDEX)} imports {sorted(bad)}"
        for package, allowed in ALLOWED.items()
        for path in (INDEX / package).rglob("*.py")
        if (bad := _imported_packages(path) - allowed - {package})
    }
    assert not wrong
