# Two entry points for a fresh machine: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-newest-pyiceberg soak lint bench services-start services-stop

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(PY) scripts/demo.py --root .demo

test: lint
	scripts/services.sh run -- $(PY) -m pytest -q $(PYTEST_ARGS)

# The tests that go through pyiceberg's internals, against the newest pyiceberg release.
test-newest-pyiceberg: install
	PY=$(PY) scripts/newest-pyiceberg.sh

# The reliability suite at its long size (kills, faults, concurrent writers, random histories).
soak: install
	ICEBERG_MAINT_SOAK=1 scripts/services.sh run -- $(PY) -m pytest -q --timeout=3600 tests/reliability $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/orphans.py
	$(PY) bench/index.py
	$(PY) bench/index.py --refresh
	$(PY) bench/index_build.py
