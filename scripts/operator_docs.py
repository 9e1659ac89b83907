"""The parameters of the operators, sensors and triggers, read from their own code (for airflow_reference.py).

Every public ``...Operator``, ``...Sensor`` and ``...Trigger`` class of
``airflow_iceberg_maint.airflow.operators``, ``.sensors`` and ``.triggers`` gets a table: its
``__init__`` parameters (with those of a base class of this package that it passes ``**kwargs`` on
to), their defaults, whether they are templated (``template_fields``), and the text of their
``:param name:`` lines in the class docstrings.
The sources are read with ``ast``: nothing is imported, so neither Airflow nor a catalog is needed;
``scripts/airflow_reference.py`` renders them into docs/airflow-reference.md.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGES = (
    "airflow_iceberg_maint/airflow/operators",
    "airflow_iceberg_maint/airflow/sensors",
    "airflow_iceberg_maint/airflow/triggers",
)
PUBLIC = re.compile(r"^[A-Z]\w*(Operator|Sensor|Trigger)$")
_PARAM = re.compile(r"^:param (\w+):\s*(.*)$")
# Defaults named by a constant that is set from another package (not readable without importing it).
EXTERNAL_CONSTANTS = {"IcebergHook.default_conn_name": "'iceberg_default'"}


@dataclass
class Param:
    name: str
    default: str | None  # None: required
    attribute: str | None  # the ``self.X = name`` it is stored in


@dataclass
class ClassInfo:
    name: str
    module: str
    bases: list[str]
    doc: str
    params: list[Param] | None  # None: no __init__ of its own
    passes_kwargs: bool
    template_fields: tuple[str, ...] | None  # names, and "*Class" for a starred ``Class.template_fields``
    param_docs: dict[str, str] = field(default_factory=dict)


@functools.cache
def _constants() -> dict[str, str]:
    """Module-level ``NAME = <literal>`` of the whole package, for defaults given by a constant's name."""
    found: dict[str, str] = {}
    for path in sorted((SRC / "airflow_iceberg_maint").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                found.setdefault(target.id, repr(value.value))
            elif isinstance(target, ast.Name) and value is not None and ast.unparse(value) in EXTERNAL_CONSTANTS:
                found.setdefault(target.id, EXTERNAL_CONSTANTS[ast.unparse(value)])
    return found


def _default(node: ast.expr, constants: dict[str, str]) -> str:
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "conf"
        and len(node.args) == 2
        and all(isinstance(a, ast.Constant) for a in node.args)
    ):
        section, key = (a.value for a in node.args)  # type: ignore[union-attr]
        fallback = next((ast.unparse(k.value) for k in node.keywords if k.arg == "fallback"), None)
        return f"[{section}] {key}" + (f", else {fallback}" if fallback else "")
    return ast.unparse(node)


def _param_docs(doc: str) -> dict[str, str]:
    """``:param name: text`` entries of a docstring, continuation lines joined."""
    docs: dict[str, str] = {}
    current: str | None = None
    for raw in doc.splitlines():
        line = raw.strip()
        match = _PARAM.match(line)
        if match:
            current = match.group(1)
            docs[current] = match.group(2)
        elif current and line and not line.startswith(":"):
            docs[current] += " " + line
        else:
            current = None
    return docs


def _init_params(init: ast.FunctionDef, constants: dict[str, str]) -> list[Param]:
    args = init.args
    stored: dict[str, str] = {}
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    stored.setdefault(node.value.id, target.attr)
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=True)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=True))
    return [
        Param(arg.arg, None if default is None else _default(default, constants), stored.get(arg.arg))
        for arg, default in pairs
        if arg.arg != "self"
    ]


def _template_fields(cls: ast.ClassDef) -> tuple[str, ...] | None:
    for node in cls.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id == "template_fields" and isinstance(value, ast.Tuple | ast.List):
            names: list[str] = []
            for element in value.elts:
                if isinstance(element, ast.Constant) and isinstance(element.value, str):
                    names.append(element.value)
                elif isinstance(element, ast.Starred) and isinstance(element.value, ast.Attribute):
                    names.append("*" + ast.unparse(element.value.value).rsplit(".", 1)[-1])
            return tuple(names)
    return None


def _templated(info: ClassInfo, classes: dict[str, ClassInfo]) -> set[str]:
    """The template fields of a class: its own ``template_fields``, else its nearest base's, starred ones expanded."""
    for cls in [info, *(classes[b] for b in info.bases if b in classes)]:
        if cls.template_fields is not None:
            names: set[str] = set()
            for name in cls.template_fields:
                if name.startswith("*") and name[1:] in classes:
                    names |= _templated(classes[name[1:]], classes)
                else:
                    names.add(name)
            return names
    return set()


@functools.cache
def collect() -> dict[str, ClassInfo]:
    """Every class of the operator, sensor and trigger modules, by name (read once; do not change the result)."""
    constants = _constants()
    classes: dict[str, ClassInfo] = {}
    for package in PACKAGES:
        for path in sorted((SRC / package).glob("*.py")):
            module = ".".join(path.relative_to(SRC).with_suffix("").parts)
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
                doc = ast.get_docstring(node) or ""
                classes[node.name] = ClassInfo(
                    name=node.name,
                    module=module,
                    bases=[ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases],
                    doc=doc,
                    params=None if init is None else _init_params(init, constants),
                    passes_kwargs=init is None or init.args.kwarg is not None,
                    template_fields=_template_fields(node),
                    param_docs=_param_docs(doc),
                )
    return classes


def _lineage(info: ClassInfo, classes: dict[str, ClassInfo]) -> list[ClassInfo]:
    """The class, then the bases of this package its keyword arguments reach, nearest first."""
    chain = [info]
    while chain[-1].passes_kwargs:
        base = next((classes[b] for b in chain[-1].bases if b in classes), None)
        if base is None:
            break
        chain.append(base)
    return chain


@dataclass(frozen=True)
class Row:
    name: str
    default: str | None
    templated: bool
    doc: str


def parameters(info: ClassInfo, classes: dict[str, ClassInfo]) -> list[Row]:
    """The parameters a class takes (its own, then those its bases of this package add), documented."""
    lineage = _lineage(info, classes)
    template_fields = _templated(info, classes)
    rows: list[Row] = []
    seen: set[str] = set()
    for cls in lineage:
        for param in cls.params or []:
            if param.name in seen:
                continue
            seen.add(param.name)
            doc = next((c.param_docs[param.name] for c in lineage if param.name in c.param_docs), "")
            templated = (param.attribute or param.name) in template_fields
            rows.append(Row(param.name, param.default, templated, doc))
    return rows


def public_classes(classes: dict[str, ClassInfo]) -> list[ClassInfo]:
    return sorted((c for c in classes.values() if PUBLIC.match(c.name)), key=lambda c: (c.module, c.name))


def cell(text: str) -> str:
    """Markdown for a table cell: reST ``literals`` as `code`, pipes escaped."""
    return text.replace("``", "`").replace("|", "\\|").strip()


def summary(doc: str) -> str:
    first = doc.split("\n\n", 1)[0]
    return " ".join(line.strip() for line in first.splitlines())
