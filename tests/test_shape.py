"""The shape of ``src/``: no module over ``MAX_LINES`` lines, no import cycle between packages.

A package here is a direct child of ``airflow_iceberg_maint`` (``orphans``, ``index``, ``fs``,
``expiry``, ``policy``, ``airflow``, ``cli``, and the top-level modules such as ``catalog``); a
nested package belongs to its top-level one. The import graph is read with ``ast`` from every
import statement, those inside functions and ``TYPE_CHECKING`` blocks included: nothing is imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from itertools import pairwise
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "airflow_iceberg_maint"
MAX_LINES = 450
Edge = tuple[str, str]  # (importing package, imported package)
Where = dict[Edge, list[str]]  # each edge's import statements, as "path:line"


def _modules(src: Path, root: str) -> dict[str, Path]:
    """Every module of the package ``root`` under ``src``, by dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in sorted((src / root).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, Path]) -> list[str]:
    """The modules of ``modules`` an import statement imports (a name imported from a module is that module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
    found = []
    for name in names:
        while name and name not in modules:  # ``import a.b.c`` of a package a.b: the nearest module
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
    return found


def _package(module: str, root: str) -> str:
    parts = module.split(".")
    return root if len(parts) == 1 else f"{root}.{parts[1]}"


def package_imports(src: Path, root: str) -> Where:
    """The import edges between the packages of ``root``, each with where it is made."""
    modules = _modules(src, root)
    where: Where = defaultdict(list)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _imported(node, module, path.name == "__init__.py", modules):
                edge = (_package(module, root), _package(target, root))
                place = f"{path.relative_to(src)}:{node.lineno}"
                if edge[0] != edge[1] and place not in where[edge]:
                    where[edge].append(place)
    return where


def _components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first node, as the list of its nodes (first one repeated)."""
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & component):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # a component of more than one node always has one


def import_cycles(src: Path, root: str) -> list[str]:
    """One line per cycle between packages: the packages in order, and the imports making each step."""
    where = package_imports(src, root)
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported in where:
        graph[importer].add(imported)
        graph.setdefault(imported, set())
    reports = []
    for component in _components(graph):
        cycle = _cycle(graph, component)
        steps = [
            f"{a} -> {b} ({', '.join(where[a, b][:3])}{', ...' if len(where[a, b]) > 3 else ''})"
            for a, b in pairwise(cycle)
        ]
        reports.append(f"cycle {' -> '.join(cycle)}: " + "; ".join(steps))
    return reports


def long_modules(src: Path) -> dict[str, int]:
    """Every module under ``src`` over ``MAX_LINES`` lines, with its line count, by path relative to ``src``."""
    counts = {str(p.relative_to(src)): len(p.read_text(encoding="utf-8").splitlines()) for p in src.rglob("*.py")}
    return {path: lines for path, lines in sorted(counts.items()) if lines > MAX_LINES}


def test_no_module_is_over_the_line_limit() -> None:
    over = long_modules(SRC)
    assert not over, f"modules over {MAX_LINES} lines (split them by job): {over}"


def test_no_import_cycle_between_packages() -> None:
    cycles = import_cycles(SRC, ROOT)
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def _write(src: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_cycle_through_a_function_level_import_is_reported(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/one.py": "from pkg.b import two\n",
            "pkg/b/__init__.py": "",
            "pkg/b/two.py": "def f():\n    from ..c.three import g\n",
            "pkg/c/__init__.py": "",
            "pkg/c/three.py": "import os\n\n\ndef g():\n    from pkg.a import one\n",
            "pkg/d.py": "from pkg.a import one\nfrom pkg import c\n",
        },
    )
    assert import_cycles(tmp_path, "pkg") == [
        "cycle pkg.a -> pkg.b -> pkg.c -> pkg.a: pkg.a -> pkg.b (pkg/a/one.py:1); "
        "pkg.b -> pkg.c (pkg/b/two.py:2); pkg.c -> pkg.a (pkg/c/three.py:5)"
    ]


def test_imports_within_a_package_and_of_the_root_package_make_no_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "__version__ = '1'\n",
            "pkg/a/__init__.py": "",
            "pkg/a/one.py": "from pkg.a.inner import two\nfrom pkg import __version__\n",
            "pkg/a/inner/__init__.py": "",
            "pkg/a/inner/two.py": "from pkg.a import one\nfrom pkg.b import three\n",
            "pkg/b/__init__.py": "",
            "pkg/b/three.py": "from pkg import __version__\n",
        },
    )
    assert dict(package_imports(tmp_path, "pkg")) == {
        ("pkg.a", "pkg"): ["pkg/a/one.py:2"],
        ("pkg.a", "pkg.b"): ["pkg/a/inner/two.py:2"],
        ("pkg.b", "pkg"): ["pkg/b/three.py:1"],
    }
    assert import_cycles(tmp_path, "pkg") == []


@pytest.mark.parametrize("lines", [MAX_LINES, MAX_LINES + 1])
def test_a_module_over_the_limit_is_found(tmp_path: Path, lines: int) -> None:
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/long.py": "x = 1\n" * lines})
    assert long_modules(tmp_path) == ({} if lines == MAX_LINES else {"pkg/long.py": lines})
