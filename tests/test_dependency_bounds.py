"""Every lower bound pyproject.toml declares is a version that is tested.

The suite runs against constraints.txt's pins only, so a lower bound below the pinned major.minor
(``pyarrow>=18`` while 26 is pinned) promises users versions nothing here ever ran. The policy
(CONTRIBUTING.md): each runtime requirement (``dependencies`` and every extra but ``test``, whose
tools are always installed pinned) has a lower bound at the major.minor constraints.txt pins, and the
pin satisfies the whole requirement (its upper bound too). Raise the bound when constraints.txt
moves up a minor.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
#: The operators that set a lower bound (``~=`` and ``==`` set one as well as an upper one).
LOWER = frozenset({">=", ">", "~=", "=="})


def pins(text: str) -> dict[str, Version]:
    """constraints.txt's ``name==version`` lines, by canonical name."""
    found: dict[str, Version] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = Version(version)
    return found


def runtime_requirements(pyproject: dict[str, Any]) -> list[str]:
    """The requirements a user's install can bring: ``dependencies`` and the extras other than ``test``."""
    project = pyproject["project"]
    extras = project.get("optional-dependencies", {})
    return list(project["dependencies"]) + [r for extra, reqs in extras.items() if extra != "test" for r in reqs]


def _major_minor(version: Version) -> tuple[int, int]:
    release = (*version.release, 0)
    return release[0], release[1]


def untested_bounds(requirements: list[str], pinned: dict[str, Version]) -> list[str]:
    """One line per requirement whose lower bound is not the major.minor constraints.txt pins, or that the pin
    does not satisfy, or that constraints.txt does not pin at all."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        pin = pinned.get(canonicalize_name(requirement.name))
        if pin is None:
            problems.append(f"{text}: constraints.txt pins no {requirement.name}, so no version of it is tested")
            continue
        if not requirement.specifier.contains(pin, prereleases=True):
            problems.append(f"{text}: the pinned {pin} is outside the declared range")
            continue
        lowers = [Version(spec.version) for spec in requirement.specifier if spec.operator in LOWER]
        tested = f"{pin.major}.{pin.minor}"
        if not lowers:
            problems.append(f"{text}: no lower bound; declare >={tested}")
        elif _major_minor(max(lowers)) < _major_minor(pin):
            problems.append(f"{text}: lower bound {max(lowers)} is below the tested {pin}; raise it to {tested}")
    return problems


def test_every_runtime_lower_bound_is_the_pinned_major_minor() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pinned = pins((ROOT / "constraints.txt").read_text(encoding="utf-8"))
    problems = untested_bounds(runtime_requirements(pyproject), pinned)
    assert not problems, "untested lower bounds in pyproject.toml:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("requirement", "problem"),
    [
        ("pyarrow>=26.0", None),
        ("pyarrow>=26", None),  # 26 is 26.0
        ("pyarrow>=26.0.1", None),
        ("PyArrow >= 26.0", None),  # names compare canonicalized, as pip compares them
        ("pyiceberg[pyarrow]>=0.12,<0.13", None),
        ("pyarrow~=26.0", None),
        ("pyarrow>=18", "lower bound 18 is below the tested 26.0.1; raise it to 26.0"),
        ("pyarrow>=25.9", "lower bound 25.9 is below the tested 26.0.1; raise it to 26.0"),
        ("pyarrow>=18,>=26.0", None),  # the tightest lower bound is the one that holds
        ("pyarrow", "no lower bound; declare >=26.0"),
        ("pyarrow<27", "no lower bound; declare >=26.0"),
        ("pyarrow>=27", "the pinned 26.0.1 is outside the declared range"),
        ("pyiceberg>=0.11,<0.12", "the pinned 0.12.0 is outside the declared range"),
        ("polars>=1.0", "constraints.txt pins no polars, so no version of it is tested"),
    ],
)
def test_the_bound_check_over_its_cases(requirement: str, problem: str | None) -> None:
    pinned = pins("# a comment\npyarrow==26.0.1\npyiceberg==0.12.0  # trailing comment\n")
    assert untested_bounds([requirement], pinned) == ([] if problem is None else [f"{requirement}: {problem}"])


def test_extras_count_and_the_test_extra_does_not() -> None:
    pyproject = {
        "project": {
            "dependencies": ["a>=1"],
            "optional-dependencies": {"gcs": ["b>=2"], "test": ["pytest>=1"]},
        }
    }
    assert runtime_requirements(pyproject) == ["a>=1", "b>=2"]
