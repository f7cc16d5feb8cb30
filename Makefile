# Ordertrack: `make run` starts the whole system; `make test` runs every test.
# Both install what they need first (a .venv from requirements.txt, the Debian
# packages, and the JVM parts of jvm/*/pom.xml through Maven), so they work on a
# fresh machine.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SYSTEM_STAMP := var/.system-deps

# make run-prod: docker-compose.yml's topology as local processes (localrun/compose/);
# with COMPOSE_FILE=docker-compose.yml:docker-compose.cluster.yml (compose's own variable:
# the files merged in order), the replicated cluster (docs/operations.md, section 6).
.PHONY: run run-prod test test-fast test-integration test-system test-passes test-backends install jvm system-deps schema lint format tail bench clean

# Debug on explicitly: the embedded mode's demo accounts and development key (debug is
# off unless asked for: config/settings.py).
run: install
	DJANGO_DEBUG=true $(PY) -m localrun

run-prod: install
	COMPOSE_FILE="$(COMPOSE_FILE)" $(PY) -m localrun.compose $(RUN_PROD_ARGS)

# The tests of the production path run a second time on PostgreSQL and Redis (throwaway
# servers: localrun/backends.py); test_production_path.py runs only there. The
# end-to-end pipeline on PostgreSQL and Redis is tests/system/localrun/test_production_run.py (separate
# processes, Spark cluster) in the first run; test_pipeline_e2e.py is not repeated here.
BACKEND_TESTS := tests/unit/orders/test_order_lifecycle.py tests/integration/kafka/test_outbox_relay.py tests/integration/api/test_api_commands.py \
	tests/integration/api/test_api_tracking.py tests/integration/live/test_live_push.py tests/integration/kafka/test_production_path.py \
	tests/integration/kafka/test_outbox_wakeup.py tests/integration/api/test_api_unavailable.py tests/integration/simulator/test_simulator_outage.py \
	tests/integration/api/test_read_freshness.py tests/integration/api/test_reads_through_outage.py \
	tests/unit/accounts/test_legacy_tokens_migration.py tests/unit/live/test_socket_tickets.py

# Three tiers (tests/README.md): unit (no engine, no subprocess, no socket), integration
# (real Kafka, Pinot, Spark, PostgreSQL, Redis), system (whole processes, browser, kills).
# `make test` (what CI runs) runs them in that order in one pytest session, then the
# backend tests a second time on PostgreSQL and Redis. Both runs always run (a failure in
# the first still shows the second's); either fails the target. One Apache Kafka and one
# Apache Pinot serve both (tests/engines.py starts them and stops them after).
TIERS := tests/unit tests/integration tests/system

test: install
	@$(PY) -m tests.engines -- $(MAKE) --no-print-directory test-passes

test-passes:
	@$(PY) -m pytest $(PYTEST_ARGS) $(TIERS); first=$$?; \
	PUSH_BRIDGE_EMBEDDED=true $(PY) -m localrun.backends -- $(PY) -m pytest $(PYTEST_ARGS) $(BACKEND_TESTS); \
	second=$$?; test $$first -eq 0 -a $$second -eq 0

# One tier each; the unit tier needs only the Python packages.
test-fast: $(STAMP)
	@$(PY) -m pytest $(PYTEST_ARGS) tests/unit

test-integration: install
	@$(PY) -m tests.engines -- $(PY) -m pytest $(PYTEST_ARGS) tests/integration

test-system: install
	@$(PY) -m tests.engines -- $(PY) -m pytest $(PYTEST_ARGS) tests/system

test-backends: install
	PUSH_BRIDGE_EMBEDDED=true $(PY) -m localrun.backends -- $(PY) -m pytest $(PYTEST_ARGS) $(BACKEND_TESTS)

install: $(STAMP) $(SYSTEM_STAMP)
	bash frontend/vendor.sh
	$(PY) -m jvm.maven

# The JVM parts (Kafka's broker, Spark's Kafka connector): each jvm/<name>/pom.xml resolved
# into var/jvm/<name>/lib (again only when its POM changes; Maven's cache in ~/.m2).
jvm: install

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

$(SYSTEM_STAMP): .ci/system-deps.sh
	bash .ci/system-deps.sh
	mkdir -p var && touch $(SYSTEM_STAMP)

# The committed OpenAPI schema (tests/system/api/test_api_clients.py fails when it differs from the server's).
schema: install
	DJANGO_DEBUG=true $(PY) manage.py spectacular --format openapi-json --validate --fail-on-warn --file docs/openapi.json

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# make tail TOPIC=orders_enriched   (follow a topic of the running system)
TOPIC ?= orders
tail: install
	DJANGO_DEBUG=true $(PY) manage.py tail_topic $(TOPIC)

# make bench NAME=push ARGS="--sockets 100 --seconds 10"   (make bench alone lists the scenarios)
bench: install
	@$(PY) -m bench $(NAME) $(ARGS)

clean:
	rm -rf var .pytest_cache
