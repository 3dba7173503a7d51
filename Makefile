# Cohort — the README's commands. Every target sets itself up from a fresh clone.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: sdk-models images compose-up compose-down install replica-access demo up test test-fast test-images test-e2e test-install lint lint-deploy migrate bench clean chromium reliability-report coverage-report

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

# Fast tests (pure units, services and API against PostgreSQL) run two at a time; so do the
# real-process tests, a file per worker (--dist loadfile: a module's browser or installed
# wheel is made once), the slowest files first (--no-loadscope-reorder keeps the order of
# tests/conftest.py, which puts modules marked slow ahead). Each test's stack has a database, Redis db or server, DATA_DIR and
# ports of its own (tests/e2e/conftest.py: each xdist worker takes its own Redis db and
# replica ports), and an agent ends only processes that carry its own marks (node id and
# DATA_DIR), so two stacks on one host never touch each other's replicas.
# The images for tests/containers are built (`make images`, once per run; a warm layer cache
# makes it about a minute) beside lint and the fast suite (test-images; TEST_RUN names the
# run, tests/containers/images_build.py), so that no worker of the real-process suite
# waits on the build.
# tests/install builds the wheel and runs it installed (not editable) in a virtualenv of
# its own, as the images do (its dependencies: a layer installed once per set of pins).
# `-ra` lists every skip with its reason; a real-stack test may
# skip only for a capability this machine lacks (tests/capabilities.py). Each real-process
# test's time goes to test-artifacts/junit-real.xml (docs/benchmarks.md, "The test suite's
# time": a third worker was tried there and made every test 1.6x slower).
# Lint (mostly one core: mypy) runs beside the fast suite (about 1.4 cores), each
# target's output shown whole when it ends (--output-sync); the real-process suite after.
# Both suites measure the product's line coverage (COV; pyproject.toml [tool.coverage]),
# the second adding to the first's, and coverage-report prints the figure and holds its floor.
PYTEST := $(PY) -m pytest -q -ra
COV := --cov --cov-report=
# One name for this `make test`: the images test-images builds are this run's.
TEST_RUN := make-test-$(shell date +%s%N)
test: chromium replica-access $(STAMP)
	$(MAKE) --no-print-directory -j3 --output-sync=target lint test-fast test-images TEST_RUN=$(TEST_RUN)
	COHORT_TEST_RUN=$(TEST_RUN) $(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder --durations=25 --junitxml=test-artifacts/junit-real.xml $(COV) --cov-append tests/containers tests/security tests/workers tests/e2e tests/faults tests/chaos tests/install
	$(MAKE) --no-print-directory coverage-report

# Cohort's images (cohort-control, cohort-worker; GPU=1 adds cohort-gpu-worker, ~3 GB of
# CUDA wheels) from the one Dockerfile, with docker or podman (COHORT_ENGINE to choose). Where
# the pinned python image cannot be pulled, on a base made from Debian's packages
# (deploy/images.py says how; docs/operations.md, "Containers").
# The Python SDK's typed models, generated from the API's OpenAPI document (a test fails
# when they differ: run this after changing an API schema).
sdk-models: $(STAMP)
	$(PY) deploy/sdk_models.py

images:
	$(PYTHON) deploy/images.py $(if $(filter 1,$(GPU)),--gpu)

# docker-compose.yml on this host (deploy/compose.py): `compose-up` builds the images, makes
# the secrets once (var/compose/, 0600), starts the stack and returns once the api answers,
# printing its address and an admin token (var/compose/token); where postgres, redis and
# minio cannot be pulled, stand-ins from Debian's packages and moto (compose.standins.yaml).
# `compose-down` keeps the volumes; `compose-down VOLUMES=1` removes them too.
compose-up:
	$(PYTHON) deploy/compose.py up

compose-down:
	$(PYTHON) deploy/compose.py down $(if $(filter 1,$(VOLUMES)),--volumes)

# Style and layout (ruff check, ruff format --check), the import contracts of pyproject.toml
# (api -> services <- workers; node and replica code holds no SQL) and the types: seconds,
# so they run before any test. .pre-commit-config.yaml runs the same as git hooks.
lint: $(STAMP) lint-deploy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/pre-commit validate-config .pre-commit-config.yaml
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

# The deployment files, without a container engine: the Dockerfile through hadolint, every
# compose file against the compose specification's schema (bundled, so offline). Images
# are not built here: see README, "Running in production".
COMPOSE_FILES := docker-compose.yml $(wildcard compose.*.yaml) $(wildcard tests/containers/compose.*.yaml)
lint-deploy: $(STAMP)
	$(VENV)/bin/hadolint Dockerfile deploy/standins/Dockerfile
	$(VENV)/bin/check-jsonschema --builtin-schema vendor.compose-spec $(COMPOSE_FILES)

test-images: $(STAMP)
	COHORT_TEST_RUN=$(TEST_RUN) $(PY) -m tests.containers.images_build

test-fast: $(STAMP)
	$(PYTEST) -n 2 $(COV) tests/unit tests/services tests/api tests/streams

# The line coverage of the product (api, services, workers, cli, cohort) that the last
# suites measured: the tests' own processes and every Python process they start with their
# environment (api, scheduler, agents, the CLI), not replicas (pyproject.toml
# [tool.coverage.run] says why). The floor is the figure `make test` reached, less a point
# for what varies between runs (retries, timings, the soak's random faults); the table per
# file goes to test-artifacts/coverage/report.txt.
COVERAGE_FLOOR ?= 91
coverage-report: $(STAMP)
	$(PY) -m coverage report > test-artifacts/coverage/report.txt
	@echo "Line coverage of the product (api, services, workers, cli, cohort), by the tests and the processes they start, replicas excepted: $$($(PY) -m coverage report --format=total)% (floor $(COVERAGE_FLOOR)%; per file: test-artifacts/coverage/report.txt)"
	@$(PY) -m coverage report --format=total --fail-under=$(COVERAGE_FLOOR) > /dev/null || { echo "line coverage is under its floor of $(COVERAGE_FLOOR)%"; exit 1; }

test-e2e: $(STAMP) chromium replica-access
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder tests/security tests/workers tests/e2e tests/faults

# docs/reliability.md's table, from a run of every fault test (bench/reliability_report.py).
reliability-report: $(STAMP) replica-access
	rm -f test-artifacts/reliability.jsonl
	$(PYTEST) -n 2 --dist loadfile --no-loadscope-reorder tests/faults
	$(PY) bench/reliability_report.py --write

# The chaos soak (tests/chaos/soak.py): JOBS small jobs on three agents while replicas,
# agents, the api and the scheduler are killed, replicas frozen, Redis and PostgreSQL
# restarted at random; then every invariant is checked from SQL and the processes. It
# prints its table (violations must be 0) and appends its record for docs/reliability.md
# (bench/reliability_report.py --write). CHAOS_SEED repeats a run's choices (each run
# prints its seed). `make test` runs it at a small size (tests/chaos/test_soak.py).
JOBS ?= 200
CHAOS_SEED ?=
.PHONY: chaos
chaos: $(STAMP) replica-access
	JOBS=$(JOBS) CHAOS_SEED=$(CHAOS_SEED) $(PY) -m tests.chaos.soak

test-install: $(STAMP) replica-access
	$(PYTEST) tests/install

# Each benchmark prints its table; docs/benchmarks.md records the figures with the date and
# the command (machine_speed.py first: the machine's yardsticks, for comparing days). The
# PostgreSQL ones make (and drop) databases of their own on 127.0.0.1:5432;
# BENCH_REDIS is the machine's Redis (each benchmark takes a db of its own and empties it).
BENCH_REDIS ?= redis://127.0.0.1:6379
bench: $(STAMP) replica-access
	$(PY) bench/machine_speed.py
	$(PY) bench/stack_lifecycle.py --rounds 5
	$(PY) bench/overhead.py --runs 3 --pool 0
	$(PY) bench/overhead.py --runs 3 --pool 2
	$(PY) bench/replica_pool.py --rounds 3 --redis $(BENCH_REDIS)/12
	$(PY) bench/replica_reporting.py --batches 10000 --rounds 5 --steps 20000
	TF_USE_LEGACY_KERAS=1 $(PY) bench/report_cost.py --steps 3000 --rounds 7
	$(PY) bench/stack_cpu.py --rounds 3 --interval 1,default
	$(PY) bench/telemetry_load.py --quick --redis $(BENCH_REDIS)/13
	$(PY) bench/job_page.py --quick --redis $(BENCH_REDIS)/13
	$(PY) bench/scheduling_pass.py --passes 5 --redis $(BENCH_REDIS)/11
	$(PY) bench/placement.py --placed --repeat 11
	$(PY) bench/api_throughput.py --duration 20 --rounds 2 --redis $(BENCH_REDIS)/14
	$(PY) bench/placement.py
	$(PY) bench/metrics.py
	$(PY) bench/schedules.py
	$(PY) bench/sweeps.py
	$(PY) bench/sweeps_optuna.py
	$(PY) bench/bundles.py
	$(PY) bench/bundle_start.py
	$(PY) bench/tensorboard_first_paint.py --rounds 5
	$(PY) bench/drains.py --rounds 3

# The dashboard's browser tests drive Debian's Chromium (never `playwright install`).
chromium:
	test -x /usr/bin/chromium || apt-get install -y chromium || (apt-get update && apt-get install -y chromium)

clean:
	rm -rf var test-artifacts .pytest_cache
