# Cohort — the README's commands. Every target sets itself up from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install replica-access demo up test test-fast test-e2e test-install lint lint-deploy migrate bench clean chromium

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e ".[dev]"
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

demo: $(STAMP) replica-access
	$(VENV)/bin/cohort demo

up: $(STAMP) replica-access
	$(VENV)/bin/cohort up

# Run as root, agents start replicas as each job's own uid, which must reach the
# interpreter and this checkout (deploy/replica_access.py; nothing when not root).
replica-access: $(STAMP)
	$(PY) deploy/replica_access.py

migrate: $(STAMP)
	$(VENV)/bin/cohort migrate

# Fast tests (pure units, services and API against PostgreSQL) run two at a time; the
# real-process tests start TensorFlow gangs and run one at a time, since two cores are all
# a gang gets and their timeouts must not fire because another test took the cores (each
# xdist worker would get its own Redis db and replica ports: tests/e2e/conftest.py).
# tests/install builds the wheel and runs it installed (not editable) in a virtualenv of
# its own, as the images do. `-ra` lists every skip with its reason; a real-stack test may
# skip only for a capability this machine lacks (tests/capabilities.py).
PYTEST := $(PY) -m pytest -q -ra
test: lint chromium replica-access
	$(PYTEST) -n 2 tests/unit tests/services tests/api tests/streams
	$(PYTEST) tests/workers tests/e2e tests/faults tests/install

# Style, the import contracts of pyproject.toml (api -> services <- workers; node and
# replica code holds no SQL) and the types: seconds, so they run before any test.
lint: $(STAMP) lint-deploy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# The deployment files, without a container engine: the Dockerfile through hadolint, every
# compose file against the compose specification's schema (bundled, so offline). Images
# are not built here: see README, "Running in production".
COMPOSE_FILES := docker-compose.yml $(wildcard compose.*.yaml)
lint-deploy: $(STAMP)
	$(VENV)/bin/hadolint Dockerfile
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec $(COMPOSE_FILES)

test-fast: $(STAMP)
	$(PYTEST) -n 2 tests/unit tests/services tests/api tests/streams

test-e2e: $(STAMP) chromium replica-access
	$(PYTEST) tests/workers tests/e2e tests/faults

test-install: $(STAMP) replica-access
	$(PYTEST) tests/install

bench: $(STAMP)
	$(PY) bench/overhead.py
	$(PY) bench/placement.py
	$(PY) bench/metrics.py
	$(PY) bench/schedules.py
	$(PY) bench/sweeps.py
	$(PY) bench/bundles.py
	$(PY) bench/bundle_start.py

# The dashboard's browser tests drive Debian's Chromium (never `playwright install`).
chromium:
	test -x /usr/bin/chromium || apt-get install -y chromium || (apt-get update && apt-get install -y chromium)

clean:
	rm -rf var test-artifacts .pytest_cache
