#!/usr/bin/env bash
# Regenerate constraints.txt: every package `pip install -e '.[test]'` puts into a fresh virtualenv,
# at the versions the resolver picks today within pyproject.toml's bounds, as `pip freeze` lists them.
#   scripts/constraints.sh            # uses python3; PYTHON=python3.11 scripts/constraints.sh to choose
# Change dependencies in pyproject.toml, then run this; never edit constraints.txt by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PYTHON" -m venv "$TMP/venv"
"$TMP/venv/bin/python" -m pip install --quiet --upgrade pip
"$TMP/venv/bin/python" -m pip install --quiet -e '.[test]'
version=$("$TMP/venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
{
  echo "# Produced by scripts/constraints.sh (Python $version): pip freeze --exclude-editable of a fresh"
  echo "# virtualenv after pip install -e '.[test]'. Change pyproject.toml and rerun it; do not edit by hand."
  "$TMP/venv/bin/python" -m pip freeze --exclude-editable
} >"$TMP/constraints.txt"
mv "$TMP/constraints.txt" constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages" >&2
