"""The provider info lists every operator, sensor, trigger and hook module on disk, and no other.

The modules are found by reading the package's source with ``ast`` (a module counts when it
defines a public class named ``...Operator``, ``...Sensor``, ``...Trigger`` or ``...Hook``), so a
new operator module left out of ``provider_info.py``, or a listed module that no longer exists,
fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from airflow_iceberg_maint.provider_info import get_provider_info

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "airflow_iceberg_maint"
#: provider info key -> (folder under airflow/, the suffix of the class names that make a module count)
KINDS = {
    "operators": ("operators", "Operator"),
    "sensors": ("sensors", "Sensor"),
    "triggers": ("triggers", "Trigger"),
    "hooks": ("hooks", "Hook"),
}


def modules_on_disk(folder: str, suffix: str) -> set[str]:
    """The modules of ``airflow/<folder>`` that define a public class whose name ends with ``suffix``."""
    found = set()
    for path in sorted((PACKAGE / "airflow" / folder).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if any(name.endswith(suffix) and not name.startswith("_") for name in names):
            found.add(f"airflow_iceberg_maint.airflow.{folder}.{path.stem}")
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_provider_info_lists_every_module_of_its_kind_on_disk_and_no_other(kind: str) -> None:
    folder, suffix = KINDS[kind]
    on_disk = modules_on_disk(folder, suffix)
    assert on_disk, f"no {kind} found under airflow/{folder}: the walk is broken"
    listed = [m for entry in get_provider_info()[kind] for m in entry["python-modules"]]
    assert len(listed) == len(set(listed)), f"{kind}: a module is listed twice: {listed}"
    assert set(listed) - on_disk == set(), f"{kind}: listed but not on disk"
    assert on_disk - set(listed) == set(), f"{kind}: on disk but not listed in provider_info.py"


def test_the_provider_info_describes_each_kind_of_maintenance() -> None:
    description = get_provider_info()["description"]
    for maintenance in ("orphan-file removal", "snapshot expiry", "compaction", "secondary indexes"):
        assert maintenance in description
