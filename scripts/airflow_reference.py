"""docs/airflow-reference.md, generated from the code: every operator, sensor, trigger, sample DAG and option.

The operators', sensors' and triggers' parameter tables come from ``operator_docs.py`` (their
``__init__`` signatures and ``:param:`` lines); the sample DAGs from ``dags/*.py`` (the ``DAG(...)``
call, its ``Param`` form, the environment it reads, its docstring's first paragraph); the
``[iceberg_maint]`` options from ``CONFIG_OPTIONS`` of ``provider_info.py``. Every source is read
with ``ast``: nothing is imported, so neither Airflow nor a catalog is needed.

    python scripts/airflow_reference.py           # rewrite docs/airflow-reference.md
    python scripts/airflow_reference.py --check   # exit 1 when the file is stale (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import operator_docs

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "airflow-reference.md"
DAGS = ROOT / "dags"
PROVIDER_INFO = ROOT / "src" / "airflow_iceberg_maint" / "provider_info.py"
_KINDS = (("Operators", "Operator"), ("Sensors", "Sensor"), ("Triggers", "Trigger"))


@dataclass(frozen=True)
class DagParam:
    name: str
    default: str | None  # None: required
    type: str
    title: str
    description: str


@dataclass(frozen=True)
class DagInfo:
    dag_id: str
    file: str
    summary: str
    schedule: str
    params: tuple[DagParam, ...]
    environment: tuple[tuple[str, str], ...]  # (variable, default) read with os.environ.get


def _text(node: ast.expr | None, names: dict[str, str]) -> str | None:
    """A string expression: a literal, a concatenation of literals, or a module constant's name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, names), _text(node.right, names)
        return None if left is None or right is None else left + right
    return None


def _type(node: ast.expr | None) -> str:
    """A ``Param``'s JSON-schema type: ``string``, or ``null or string`` for a list."""
    if node is None:
        return ""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)
    return " or ".join(value) if isinstance(value, list) else str(value)


def _dag_param(name: str, call: ast.Call) -> DagParam:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    default = ast.unparse(call.args[0]) if call.args else None
    kind = keywords.get("type")
    return DagParam(
        name=name,
        default=default,
        type=_type(kind),
        title=_text(keywords.get("title"), {}) or "",
        description=_text(keywords.get("description"), {}) or "",
    )


def _dag(path: Path) -> DagInfo | None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    call = next(
        (
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "DAG"
        ),
        None,
    )
    if call is None:
        return None
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    params: list[DagParam] = []
    form = keywords.get("params")
    if isinstance(form, ast.Dict):
        for key, value in zip(form.keys, form.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(value, ast.Call):
                params.append(_dag_param(str(key.value), value))
    environment = [
        (str(node.args[0].value), ast.unparse(node.args[1]) if len(node.args) > 1 else "None")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "os.environ.get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    doc = ast.get_docstring(tree) or ""
    schedule = keywords.get("schedule")
    return DagInfo(
        dag_id=_text(keywords.get("dag_id"), {}) or path.stem,
        file=path.relative_to(ROOT).as_posix(),
        summary=operator_docs.summary(doc),
        schedule="None" if schedule is None else ast.unparse(schedule),
        params=tuple(params),
        environment=tuple(environment),
    )


def dags() -> list[DagInfo]:
    """The sample DAGs of dags/, by DAG id."""
    found = (_dag(path) for path in sorted(DAGS.glob("*.py")))
    return sorted((d for d in found if d is not None), key=lambda d: d.dag_id)


def config_options() -> dict[str, dict[str, str | None]]:
    """``CONFIG_OPTIONS`` of provider_info.py: each option's description, example and default."""
    tree = ast.parse(PROVIDER_INFO.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    options: dict[str, dict[str, str | None]] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name) or value is None:
            continue
        text = _text(value, names)
        if text is not None:
            names[target.id] = text
        elif target.id == "CONFIG_OPTIONS" and isinstance(value, ast.Dict):
            for key, body in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(body, ast.Dict):
                    fields = {
                        str(k.value): _text(v, names)
                        for k, v in zip(body.keys, body.values, strict=True)
                        if isinstance(k, ast.Constant)
                    }
                    options[str(key.value)] = fields
    return options


def _class_sections() -> list[str]:
    classes = operator_docs.collect()
    public = operator_docs.public_classes(classes)
    lines: list[str] = []
    for title, suffix in _KINDS:
        lines += ["", f"## {title}"]
        for info in (c for c in public if c.name.endswith(suffix)):
            module = info.module.removeprefix("airflow_iceberg_maint.airflow.")
            summary = operator_docs.cell(operator_docs.summary(info.doc))
            lines += ["", f"### `{info.name}`", "", f"`{module}.{info.name}`: {summary}", ""]
            rows = operator_docs.parameters(info, classes)
            if not rows:
                lines.append("No parameters of its own.")
                continue
            lines += ["| parameter | default | templated | meaning |", "| --- | --- | --- | --- |"]
            for row in rows:
                default = "required" if row.default is None else f"`{operator_docs.cell(row.default)}`"
                meaning = operator_docs.cell(row.doc) or "*no `:param:` line in the docstring*"
                lines.append(f"| `{row.name}` | {default} | {'yes' if row.templated else ''} | {meaning} |")
    return lines


def _dag_sections() -> list[str]:
    lines = ["", "## Sample DAGs", "", "Copy them from `dags/` into your DAG folder; each starts paused."]
    for dag in dags():
        lines += ["", f"### `{dag.dag_id}`", "", f"`{dag.file}`: {operator_docs.cell(dag.summary)}", ""]
        lines.append(f"Schedule: `{operator_docs.cell(dag.schedule)}`.")
        for variable, default in dag.environment:
            lines.append(f"Reads `{variable}` from the environment when parsed (default `{default}`).")
        if not dag.params:
            lines += ["", "No trigger form: it takes no parameters."]
            continue
        lines += ["", "| parameter | default | type | title: meaning |", "| --- | --- | --- | --- |"]
        for param in dag.params:
            default = "required" if param.default is None else f"`{operator_docs.cell(param.default)}`"
            meaning = operator_docs.cell(": ".join(p for p in (param.title, param.description) if p))
            lines.append(f"| `{param.name}` | {default} | `{operator_docs.cell(param.type)}` | {meaning} |")
    return lines


def _option_section() -> list[str]:
    lines = [
        "",
        "## Options: `[iceberg_maint]`",
        "",
        "Set in `airflow.cfg` or as `AIRFLOW__ICEBERG_MAINT__<OPTION>` on the workers and the api-server alike.",
        "",
        "| option | default | example | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, fields in config_options().items():
        default = fields.get("default")
        example = fields.get("example")
        lines.append(
            f"| `{name}` | {'unset' if default is None else f'`{default}`'} | "
            f"{'' if example is None else f'`{example}`'} | {operator_docs.cell(fields.get('description') or '')} |"
        )
    return lines


def render() -> str:
    """The whole of docs/airflow-reference.md."""
    lines = [
        "# Airflow reference: operators, sensors, triggers, sample DAGs, options",
        "",
        "<!-- Generated by scripts/airflow_reference.py from the code; do not edit by hand. -->",
        "",
        "Every parameter, generated from the code (`python scripts/airflow_reference.py`;",
        "`tests/test_docs.py` fails when this file is stale). How to use them: [airflow.md](airflow.md).",
        "*Templated*: the value may be a Jinja template, rendered before the task runs. Airflow's own",
        "arguments (`task_id`, `pool`, `retries`, `poke_interval`, `timeout`, ...) are not repeated here.",
        "Triggers are built by the sensors and operators that defer (`IcebergIndexLagEventTrigger` by an",
        "`AssetWatcher` in a DAG); their arguments are never templated.",
        *_class_sections(),
        *_dag_sections(),
        *_option_section(),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/airflow-reference.md is stale")
    args = parser.parse_args(argv)
    fresh = render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if current == fresh:
        return 0
    if args.check:
        print(f"{TARGET}: stale; run python scripts/airflow_reference.py", file=sys.stderr)
        return 1
    TARGET.write_text(fresh, encoding="utf-8")
    print(f"{TARGET}: rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
