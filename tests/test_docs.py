"""The documents: links resolve inside the repository, generated tables are current, the README stays short.

Fast and without services: files are read and parsed (``ast``), nothing is imported from Airflow.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_spec = importlib.util.spec_from_file_location("operator_docs", ROOT / "scripts" / "operator_docs.py")
assert _spec is not None and _spec.loader is not None
operator_docs = importlib.util.module_from_spec(_spec)
sys.modules["operator_docs"] = operator_docs  # dataclasses look their module up while the class is built
_spec.loader.exec_module(operator_docs)

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`[^`]*`")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        seen = counts.get(slug, 0)
        counts[slug] = seen + 1
        found.add(slug if seen == 0 else f"{slug}-{seen}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    result = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            result.append((number, match.group(1)))
    return result


def test_the_link_checker_reads_headings_and_links_as_github_does(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# The `iceberg-maint` command: its contract\n"
        "## S4. A listed file is deletable only if no referenced path could name the same file\n"
        "### 2026-11-30\n### 2026-11-30\n"
        "```bash\n# not a heading\n[not](a-link.md)\n```\n"
        "See [the rules](safety.md#s1-x) and `[code](not-a-link.md)`, ![img](pic.png).\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "the-iceberg-maint-command-its-contract",
        "s4-a-listed-file-is-deletable-only-if-no-referenced-path-could-name-the-same-file",
        "2026-11-30",
        "2026-11-30-1",
    }
    assert links(page) == [(9, "safety.md#s1-x")]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(document: Path) -> None:
    broken = []
    for number, target in links(document):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            broken.append(f"{document.name}:{number}: {target}: points outside the repository")
            continue
        path_part, _, anchor = target.partition("#")
        resolved = (document.parent / path_part).resolve() if path_part else document
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            broken.append(f"{document.name}:{number}: {target}: no such file in the repository")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{document.name}:{number}: {target}: no heading with that anchor")
    assert not broken, "\n".join(broken)


_OUTSIDE = re.compile(
    r"\.\./shared|shared/|shared CLI|command-line document|[^/\w]CLI\.md|orphan-removal design"
    # Sections of a specification that is not in the repository: say the point, or name a section of docs/.
    r"|the spec's|\bof the spec\b|\bPart \d|§|\bAppendix [A-Z]\b|Extract Schema|adapter layer|strategy layer"
)


def test_the_outside_pointer_check_catches_spec_section_references() -> None:
    caught = [
        "(the spec's adapter layer)",
        "(Part 1, Extract Schema)",
        "Decisions on the open questions (spec Part 4, §5)",
        "# Appendix C of the spec",
    ]
    assert all(_OUTSIDE.search(line) for line in caught)
    kept = ["the Iceberg table spec's retention", '(docs/index-format.md, "Incremental refresh")', "extract schema 0"]
    assert not any(_OUTSIDE.search(line) for line in kept)


def test_no_comment_or_document_points_at_documents_outside_the_repository() -> None:
    places = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    for folder in ("src", "dags", "scripts", "bench", "tests"):
        places += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".yaml", ".yml", ".md", ".sh"}]
    here = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in places
        if path.resolve() != here
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_operator_parameter_tables_of_airflow_md_are_current() -> None:
    text = (ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    block = operator_docs.current_block(text)
    assert block is not None, "docs/airflow.md lost its generated block"
    assert block == operator_docs.render(), "stale: run python scripts/operator_docs.py"


def test_every_public_operator_and_sensor_is_documented() -> None:
    classes = operator_docs.collect()
    names = {c.name for c in operator_docs.public_classes(classes)}
    assert {"IcebergRemoveOrphanFilesOperator", "IcebergTableDueSensor", "IcebergIndexLagSensor"} <= names
    orphans = classes["IcebergRemoveOrphanFilesOperator"]
    rows = {row.name: row for row in operator_docs.parameters(orphans, classes)}
    assert rows["table"].default is None and rows["table"].templated
    assert rows["dry_run"].templated  # stored as self.is_dry_run, templated under that name
    assert rows["iceberg_conn_id"].default == "'iceberg_default'" and not rows["iceberg_conn_id"].templated
    assert "delete nothing" in rows["dry_run"].doc
    # A subclass shows the parameters it passes on to its base.
    planned = {row.name for row in operator_docs.parameters(classes["IcebergPlanOrphanShardsOperator"], classes)}
    assert {"shards", "table", "older_than_days", "dry_run"} <= planned


# Arguments every Airflow operator or sensor takes (BaseOperator, BaseSensorOperator).
_AIRFLOW_ARGUMENTS = {
    "task_id", "pool", "retries", "retry_delay", "queue", "priority_weight", "trigger_rule", "doc_md",
    "poke_interval", "timeout", "mode", "soft_fail", "exponential_backoff", "max_wait", "execution_timeout",
    "map_index_template", "deferrable", "owner", "depends_on_past",
}  # fmt: skip


def test_the_readme_dag_uses_only_parameters_the_operators_take() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    assert blocks, "the README shows one DAG"
    classes = operator_docs.collect()
    checked = 0
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
                taken = {row.name for row in operator_docs.parameters(classes[node.func.id], classes)}
                unknown = {k.arg for k in node.keywords if k.arg} - taken - _AIRFLOW_ARGUMENTS
                assert not unknown, f"{node.func.id} takes no {sorted(unknown)}"
                checked += 1
    assert checked >= 2


def test_the_readme_is_read_in_five_minutes() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    # A fresh machine needs two commands; the contributors' everyday ones are listed apart.
    set_up = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^make (\w+)", set_up, flags=re.MULTILINE) == ["demo", "test"]
    assert "make unit" in readme and "make help" in readme


_SRC = ROOT / "src"
_AIRFLOW_RELATIVE = ("operators.", "sensors.", "triggers.", "hooks.", "ui.")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


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


def code_references(path: Path) -> list[tuple[int, str]]:
    """The dotted names of this package a document gives: ``airflow_iceberg_maint....`` code spans and
    imports, and ``operators.x.Class`` spans (or sensors, triggers, hooks, ui), relative to the Airflow package."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        imported = re.match(r"\s*from (airflow_iceberg_maint[\w.]*) import ([\w, ]+)", line)
        if imported:
            found += [(number, f"{imported.group(1)}.{n.strip()}") for n in imported.group(2).split(",") if n.strip()]
        for span in re.findall(r"`([^`]+)`", line):
            span = span.strip().removesuffix("()")
            if not _DOTTED.match(span):
                continue
            if span.startswith("airflow_iceberg_maint."):
                found.append((number, span))
            elif span.startswith(_AIRFLOW_RELATIVE):
                found.append((number, "airflow_iceberg_maint.airflow." + span))
    return found


def test_the_reference_checker_finds_wrong_module_paths(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "`operators.index.IcebergCreateMissingIndexesOperator` and "
        "`operators.index_definitions.IcebergCreateMissingIndexesOperator`, `sales.orders`\n"
        "from airflow_iceberg_maint.airflow.sensors.due import IcebergTableDueSensor\n",
        encoding="utf-8",
    )
    references = code_references(page)
    assert references == [
        (1, "airflow_iceberg_maint.airflow.operators.index.IcebergCreateMissingIndexesOperator"),
        (1, "airflow_iceberg_maint.airflow.operators.index_definitions.IcebergCreateMissingIndexesOperator"),
        (2, "airflow_iceberg_maint.airflow.sensors.due.IcebergTableDueSensor"),
    ]
    assert [resolves(name) for _, name in references] == [False, True, True]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_and_class_a_document_names_exists(document: Path) -> None:
    wrong = [f"{document.name}:{number}: {name}" for number, name in code_references(document) if not resolves(name)]
    assert not wrong, "no such module or name in src/:\n" + "\n".join(wrong)
