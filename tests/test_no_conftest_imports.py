"""No module of the tests imports a conftest module: shared helpers live in ``tests/support/``.

pytest loads each conftest file itself (for its fixtures and hooks); importing one from a test module
loads it a second time under its package name, with its module-level code run again. Read with ``ast``.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def conftest_imports(root: Path) -> list[str]:
    """Every import of a conftest module under ``root``, as ``path:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(n.split(".")[-1] == "conftest" for n in names):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_test_module_imports_a_conftest_module() -> None:
    assert conftest_imports(TESTS) == []


def test_an_import_of_a_conftest_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("from tests.airflow.conftest import DAGS\nimport tests.conftest\n")
    assert conftest_imports(tmp_path) == ["test_x.py:1", "test_x.py:2"]
