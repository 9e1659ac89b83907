"""The project's wheel, installed into a clean virtual environment with Apache Airflow, works as users meet it.

The wheel is built from a copy of the sources (pip builds in the source tree and would leave ``build/`` and
``src/*.egg-info`` there: the second copy of the metadata that made Airflow load the plugin twice), then
``pip install``ed with ``-c constraints.txt`` into a new virtual environment, so Airflow and every dependency
are the pinned versions. That environment's pip reads the machine's pip configuration (its files and
``PIP_*`` variables are passed through untouched), so it installs from the same package index.

Measured on 2 cores shared with other runs (load 3 to 5): building the wheel, the venv and the install take
about 100 s, the first time and repeated alike (pip's cache stays empty here: the index's downloads are not
cached), the checks about 25 s. That is under the 3 minutes past which reusing a venv between sessions would
pay off, so each session installs into a clean venv of its own, removed at the end.

Skipped, with pip's words as the reason, only when pip cannot reach the package index (under CI: failed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.test_dependency_bounds import pins

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
NAME: str = PROJECT["name"]
VERSION: str = PROJECT["version"]
PACKAGE = "airflow_iceberg_maint"
#: Variables that would make the venv's Python import this checkout, or Airflow read the developer's setup.
LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "AIRFLOW_HOME")

#: What pip (urllib3, requests) logs when the index cannot be reached, as opposed to answering without the package.
UNREACHABLE = ("connection broken by", "Could not fetch URL", "Max retries exceeded", "ConnectTimeout", "ReadTimeout")

# Run by the venv's Python, outside the checkout: what Airflow's plugin manager loaded and what the
# installed distribution holds, as JSON into the file argv[2] (Airflow logs its warnings to stdout).
PROBE = """
import json, pathlib, sys
from importlib.metadata import distribution
from airflow import plugins_manager
import airflow_iceberg_maint

dist = distribution(sys.argv[1])
api = airflow_iceberg_maint.remove_orphan_files
pathlib.Path(sys.argv[2]).write_text(json.dumps({
    "plugins": plugins_manager.get_plugin_info(["source"]),
    "plugin_errors": plugins_manager.get_import_errors(),
    "files": {str(f): str(f.locate()) for f in dist.files},
    "license_expression": dist.metadata.get("License-Expression"),
    "package_file": airflow_iceberg_maint.__file__,
    "package_version": airflow_iceberg_maint.__version__,
    "api": [api.__module__, api.__name__, callable(api)],
}, default=str))
"""


@dataclass(frozen=True)
class Installed:
    venv: Path
    env: dict[str, str]
    work: Path  # the working folder of every command: not the checkout, whose src/ must not be imported

    def run(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(a) for a in args],
            cwd=self.work,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


def _environment(airflow_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LEAKS and not k.startswith("AIRFLOW__")}
    return {**env, "AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}


def _skip_unless_the_index_answers(env: dict[str, str], cwd: Path) -> None:
    """The one reason to skip: pip cannot reach the package index (the machine's pip configuration). An index
    that answers without apache-airflow fails the test."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "apache-airflow", "--timeout", "30", "--retries", "1"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode == 0:
        return
    unreachable = [line for line in proc.stderr.splitlines() if any(sign in line for sign in UNREACHABLE)]
    assert unreachable, f"pip index versions apache-airflow exited {proc.returncode}:\n{proc.stderr}"
    reason = f"pip cannot reach the package index: {unreachable[-1].strip()}"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _build_wheel(work: Path, env: dict[str, str]) -> Path:
    """The wheel pip builds from a copy of what pyproject.toml packages: itself, its readme and license, src/."""
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", PROJECT["readme"], *PROJECT["license-files"]):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(source)],
        cwd=work,
        env=env,
        check=True,
        timeout=600,
    )
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    return wheel


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    # Not tmp_path_factory: pytest keeps the last three sessions' folders, and this venv is about 800 MB.
    with tempfile.TemporaryDirectory(prefix="wheel-install-") as folder:
        work = Path(folder)
        env = _environment(work / "airflow-home")
        _skip_unless_the_index_answers(env, work)
        wheel = _build_wheel(work, env)
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=env, check=True, timeout=300)
        box = Installed(venv=venv, env=env, work=work)
        box.run(box.bin("python"), "-m", "pip", "install", "--quiet", "-c", ROOT / "constraints.txt", wheel)
        yield box


def _probe(installed: Installed, **env: str) -> dict[str, Any]:
    script, out = installed.work / "probe.py", installed.work / "probe.json"
    script.write_text(PROBE, encoding="utf-8")
    installed.run(installed.bin("python"), script, NAME, out, **env)
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return result


@pytest.fixture(scope="module")
def probe(installed: Installed) -> dict[str, Any]:
    return _probe(installed)


def test_the_wheel_installs_with_airflow_at_the_pinned_versions(installed: Installed) -> None:
    installed.run(installed.bin("python"), "-m", "pip", "check")
    listed = json.loads(installed.run(installed.bin("python"), "-m", "pip", "list", "--format", "json").stdout)
    versions = {canonicalize_name(p["name"]): Version(p["version"]) for p in listed}
    assert versions[canonicalize_name(NAME)] == Version(VERSION)
    pinned = pins((ROOT / "constraints.txt").read_text(encoding="utf-8"))
    assert versions[canonicalize_name("apache-airflow")] == pinned["apache-airflow"]
    assert {n: v for n, v in versions.items() if n in pinned and v != pinned[n]} == {}


def test_airflow_lists_the_provider_at_pyprojects_version(installed: Installed) -> None:
    providers = json.loads(installed.run(installed.bin("airflow"), "providers", "list", "--output", "json").stdout)
    assert [p["version"] for p in providers if p["package_name"] == NAME] == [VERSION]


def test_the_plugin_loads_once_without_import_errors(installed: Installed, probe: dict[str, Any]) -> None:
    """Once through its entry point, whether Airflow discovers providers lazily (the default) or not."""
    eager = _probe(installed, AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS="False")
    for report in (probe, eager):
        assert report["plugin_errors"] == {}
        ours = [p["source"] for p in report["plugins"] if p["name"] == "iceberg_maint"]
        assert len(ours) == 1, ours
        assert ours[0].startswith(f"{NAME}=={VERSION}: EntryPoint(name='iceberg_maint'")


def test_the_command_prints_pyprojects_version(installed: Installed) -> None:
    assert installed.run(installed.bin("iceberg-maint"), "--version").stdout.strip() == f"iceberg-maint {VERSION}"


def test_py_typed_and_the_license_are_installed(probe: dict[str, Any]) -> None:
    files = probe["files"]
    py_typed, license_file = f"{PACKAGE}/py.typed", f"{PACKAGE}-{VERSION}.dist-info/licenses/LICENSE"
    assert {py_typed, license_file} <= files.keys(), "the installed distribution lacks py.typed or LICENSE"
    assert Path(files[py_typed]).is_file()
    assert Path(files[license_file]).read_bytes() == (ROOT / "LICENSE").read_bytes()
    assert probe["license_expression"] == PROJECT["license"]


def test_the_python_api_resolves_from_the_installed_package(installed: Installed, probe: dict[str, Any]) -> None:
    module, name, is_callable = probe["api"]
    assert (module.split(".")[0], name, is_callable) == (PACKAGE, "remove_orphan_files", True)
    assert probe["package_version"] == VERSION
    site_packages = installed.venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert Path(probe["package_file"]).is_relative_to(site_packages / "site-packages")
