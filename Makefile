# Two entry points for a fresh machine: `make demo` and `make test`; `make unit` is the fast inner loop.
# `make help` lists the targets: each documented by its `## ` comment.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The tests that need no service and start no process: tests/conftest.py marks those that do (SERVICE_FIXTURES,
# SLOW); the browser test and the reliability suite are marked in their files.
UNIT_TESTS := not (s3 or postgres or gcs or azure or rest or browser or celery or reliability or slow)

.DEFAULT_GOAL := help
.PHONY: help install demo unit test test-newest-pyiceberg soak lint bench services-start services-stop

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /\1	/' | expand -t 24

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

# pip's editable install runs setuptools' egg_info, which writes src/airflow_iceberg_maint.egg-info (egg_base is
# the package root, src/) and leaves it there; src/ is on sys.path (the editable install's .pth), so importlib.metadata
# then finds the project twice, and Airflow, which reads entry points from every distribution, loads the plugin twice
# ("Plugin 'iceberg_maint' already registered" on its home page). The installed dist-info is the only metadata needed.
install: $(STAMP) ## Create the venv (VENV=.venv) and install the package with its test tools, pinned by constraints.txt
	rm -rf src/*.egg-info

demo: install ## Build .demo/ and show orphan removal (CLI and Airflow) and the index event flow
	$(PY) scripts/demo.py --root .demo

# Without the services' variables a test that reaches a service fails (ICEBERG_MAINT_UNIT_RUN), not skips.
unit: install ## The tests that need no service and start no process (no DAG runs, no CLI subprocesses)
	env -u CI -u TEST_PG_URL -u TEST_S3_ENDPOINT -u TEST_AZURITE_BLOB_ENDPOINT -u TEST_GCS_ENDPOINT \
	  -u TEST_FAKE_GCS_ENDPOINT -u TEST_REST_URI -u TEST_SEAWEED_S3_ENDPOINT -u TEST_CHROMIUM -u TEST_REDIS_URL \
	  -u TEST_CELERY_PORT ICEBERG_MAINT_UNIT_RUN=1 \
	  $(PY) -m pytest -q -n auto -m "$(UNIT_TESTS)" $(PYTEST_ARGS)

test: lint ## Lint, start the services (PostgreSQL, S3, Azurite, GCS emulators, SeaweedFS, Redis, chromium), run every test
	scripts/services.sh run -- $(PY) -m pytest -q $(PYTEST_ARGS)

# The tests that go through pyiceberg's internals, against the newest pyiceberg release.
test-newest-pyiceberg: install ## The pyiceberg-internals tests against the newest pyiceberg release
	PY=$(PY) scripts/newest-pyiceberg.sh

# The reliability suite at its long size (kills, faults, concurrent writers, random histories).
soak: install ## The reliability suite at its long size
	ICEBERG_MAINT_SOAK=1 scripts/services.sh run -- $(PY) -m pytest -q --timeout=3600 tests/reliability $(PYTEST_ARGS)

lint: install ## ruff check, ruff format --check, mypy (src strict; tests with the relaxations of pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: install ## The orphan-scan, snapshot-expiry, index and compaction benchmarks
	$(PY) bench/orphans.py
	$(PY) bench/expire.py
	$(PY) bench/index.py
	$(PY) bench/index.py --refresh
	$(PY) bench/index_build.py
	test -x bench/.venvs/zamboni/bin/python || (python3 -m venv bench/.venvs/zamboni && bench/.venvs/zamboni/bin/pip install --quiet iceberg-zamboni==0.7.0)
	$(PY) bench/compaction.py
