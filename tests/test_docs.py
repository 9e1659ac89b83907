"""The documents: links resolve inside the repository, generated tables are current, the README stays short.

Fast and without services: files are read and parsed (``ast``), nothing is imported from Airflow.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The documents for users and contributors; docs/benchmarks/ holds the dated history of the figures.
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "benchmarks").glob("*.md")),
]


def _script(name: str) -> ModuleType:
    """A module of scripts/, loaded by path (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


operator_docs = _script("operator_docs")
airflow_reference = _script("airflow_reference")  # imports operator_docs by name, loaded above

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
    places = list(DOCUMENTS)
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


def test_the_generated_airflow_reference_is_current() -> None:
    committed = (ROOT / "docs" / "airflow-reference.md").read_text(encoding="utf-8")
    assert committed == airflow_reference.render(), "stale: run python scripts/airflow_reference.py"


def test_the_airflow_reference_holds_every_class_dag_and_option() -> None:
    text = airflow_reference.render()
    headings = set(re.findall(r"^### `(\w+)`$", text, flags=re.MULTILINE))
    classes = {c.name for c in operator_docs.public_classes(operator_docs.collect())}
    dag_ids = {dag.dag_id for dag in airflow_reference.dags()}
    assert len(dag_ids) == len(list((ROOT / "dags").glob("*.py"))), "a file of dags/ defines no DAG the script reads"
    assert classes | dag_ids <= headings
    manual = next(d for d in airflow_reference.dags() if d.dag_id == "iceberg_orphan_cleanup_manual")
    params = {p.name: p for p in manual.params}
    assert params["table"].default is None and params["dry_run"].default == "True"
    assert params["location"].type == "null or string"
    options = airflow_reference.config_options()
    assert {"report_location", "state_url", "manual_dag_id"} <= set(options)
    assert "Set it on the workers and the api-server alike." in (options["state_url"]["description"] or "")


def test_the_airflow_guide_counts_what_the_code_holds() -> None:
    opening = " ".join((ROOT / "docs" / "airflow.md").read_text(encoding="utf-8").split("\n## ", 1)[0].split())
    counted = re.search(r"(\d+) operators, (\d+) sensors and (\d+) triggers, and ships (\d+) sample DAGs", opening)
    assert counted, "docs/airflow.md opens with what the provider holds"
    public = [c.name for c in operator_docs.public_classes(operator_docs.collect())]
    held = [sum(name.endswith(kind) for name in public) for kind in ("Operator", "Sensor", "Trigger")]
    assert [int(n) for n in counted.groups()] == [*held, len(airflow_reference.dags())]


def test_the_airflow_guide_holds_no_test_inventory() -> None:
    guide = (ROOT / "docs" / "airflow.md").read_text(encoding="utf-8")
    assert not re.findall(r"tests/[\w/]+\.py", guide), "test inventories belong in CONTRIBUTING.md"


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
    # A fresh machine needs two commands; the contributors' everyday ones are in CONTRIBUTING.md.
    set_up = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^make (\w+)", set_up, flags=re.MULTILINE) == ["demo", "test"]
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert "make unit" in contributing and "make help" in contributing and "make soak" in contributing
    # Users first: what it is, installing, a DAG and the command line come before building it from a checkout.
    sections = re.findall(r"^## (.+)$", readme, flags=re.MULTILINE)
    order = [next((i for i, s in enumerate(sections) if s.startswith(name)), -1) for name in _README_ORDER]
    assert -1 not in order and order == sorted(order), f"README sections {sections}: expected {_README_ORDER} in order"
    assert not re.search(r"^## Contributing", readme, flags=re.MULTILINE), "contributing belongs in CONTRIBUTING.md"


_README_ORDER = ["Install", "One DAG", "The command line", "What was measured", "Set up"]


def test_the_readme_figures_are_current_not_targets() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    measured = readme.split("## What was measured", 1)[1].split("\n## ", 1)[0]
    assert not re.search(r"\btargets?\b|not met|\bwas \d", measured), "the README gives today's figures only"


def test_benchmarks_md_has_a_section_for_each_bench_script() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    for script in sorted((ROOT / "bench").glob("*.py")):
        name = f"bench/{script.name}"
        assert any(name in section for section in sections if not section.startswith("How")), f"no section runs {name}"
    dated = re.findall(r"^### \d{4}-\d\d-\d\d", text, flags=re.MULTILINE)
    assert not dated, "dated entries go to docs/benchmarks/history.md"


def _defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
    return names


def test_every_test_a_document_names_exists() -> None:
    """The safety rules and guides cite their tests as ``file.py::test_name`` or ``::test_name``:
    a renamed or removed test must not leave a rule pointing at nothing (``test_name`` itself is
    CONTRIBUTING.md's placeholder)."""
    defined = _defined_tests() | {"test_name"}
    cited = {
        (document.name, name)
        for document in DOCUMENTS
        for name in re.findall(r"::(test_\w+)", document.read_text(encoding="utf-8"))
    }
    assert cited and {(document, name) for document, name in cited if name not in defined} == set()
