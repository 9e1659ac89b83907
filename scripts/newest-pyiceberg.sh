#!/usr/bin/env bash
# The tests that go through pyiceberg's internals (src/airflow_iceberg_maint/pyiceberg_compat.py:
# manifests, live rows, pruning, deletes, the commit requirement of S18), against the newest
# pyiceberg release the package index offers, so that a break shows here before users see it.
# When that release is the one constraints.txt pins, `make test` has already run them and this
# says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
VENV_NEWEST=.venv-newest-pyiceberg

pinned=$(sed -n 's/^pyiceberg==//p' constraints.txt)
newest=$("$PY" -m pip index versions pyiceberg 2>/dev/null | sed -n 's/^pyiceberg (\(.*\))$/\1/p')
if [ -z "$newest" ]; then
  echo "newest-pyiceberg: the package index did not answer for pyiceberg" >&2
  exit 1
fi
if [ "$newest" = "$pinned" ]; then
  echo "newest-pyiceberg: pyiceberg $newest is both the newest release and the pinned one; make test ran it"
  exit 0
fi

echo "newest-pyiceberg: testing against pyiceberg $newest (pinned: $pinned)"
test -x "$VENV_NEWEST/bin/python" || python3 -m venv "$VENV_NEWEST"
grep -v -E '^pyiceberg(-core)?==' constraints.txt >"$VENV_NEWEST/constraints.txt"
"$VENV_NEWEST/bin/python" -m pip install --quiet --upgrade pip
"$VENV_NEWEST/bin/python" -m pip install --quiet -c "$VENV_NEWEST/constraints.txt" -e '.[test]'
rm -rf src/*.egg-info  # a second copy of the metadata on the editable path: see the install target of the Makefile
# Past the cap in pyproject.toml on purpose: pip warns that the project asks for less.
"$VENV_NEWEST/bin/python" -m pip install --quiet --upgrade \
  "pyiceberg[sql-sqlite,sql-postgres,pyarrow,pyiceberg-core]==$newest"
"$VENV_NEWEST/bin/python" -c "import sys, pyiceberg; print('newest-pyiceberg: installed', pyiceberg.__version__); sys.exit(pyiceberg.__version__ != '$newest')"
VENV=$VENV_NEWEST scripts/services.sh run -- "$VENV_NEWEST/bin/python" -m pytest -q \
  tests/test_pyiceberg_compat.py tests/orphans tests/index tests/expiry/test_concurrent_commits.py
