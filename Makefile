# reasonwire — every target does its own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The sample streams (all in the repository): the two article cases of every grammar under
# tests/fixtures, or every <grammar>/*.jsonl of the folder RW_SAMPLES names (as `reasonwire demo`).
SAMPLE_CASES := a_reasoning_then_answer b_reasoning_then_tool_call
SAMPLES = $(sort $(if $(RW_SAMPLES),$(wildcard $(RW_SAMPLES)/*/*.jsonl),$(foreach c,$(SAMPLE_CASES),$(wildcard tests/fixtures/*/$(c).jsonl))))

.DEFAULT_GOAL := help
.PHONY: help install services services-down test test-unit run gateway e2e-deps translate-samples clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,native]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install reasonwire with its test dependencies

# The compiled core (tools/build_native.py, mypyc; workers/ops/native.py loads it only while every
# source it was built from is unchanged). Without a C compiler everything runs as pure Python.
NATIVE := build/native/manifest.json
$(NATIVE): $(STAMP) $(shell $(PYTHON) tools/build_native.py --sources)
	@$(PY) tools/build_native.py || echo "make native: the core stays pure Python (see above)"

.PHONY: native
native: $(NATIVE) ## compile the hot path (core, translators, envelope reader, P8 registry) with mypyc into build/native (used while current; RW_NATIVE=off: pure Python)

services: ## start Kafka (KRaft) and Redis on 127.0.0.1:9092/6379 (KAFKA_PORT, REDIS_PORT), idempotent; refuses ports it did not take
	bash deploy/services.sh up

services-down: ## stop the local Kafka and Redis
	bash deploy/services.sh down

# Services (deploy/with-services.sh): the ones KAFKA_BOOTSTRAP_SERVERS / REDIS_URL name, else
# a private Kafka + Redis on spare ports, stopped afterwards. Where a Docker engine answers
# (or RW_SERVICES=testcontainers) the integration fixtures start containers instead.
test: $(STAMP) $(NATIVE) ## run every test (unit, conformance, integration), services included, on its own spare ports
	@$(MAKE) --no-print-directory e2e-deps || echo "make test: could not install Node.js / chromium / the pinned npm packages; the gateway's browser and HttpAgent tests will skip, saying so"
	@svc=$$($(PY) -m tests.integration.service_choice) || exit 2; \
	if [ "$$svc" = local ]; then \
	  RW_CREATE_TOPICS=true bash deploy/with-services.sh $(PY) -m pytest -q; \
	else \
	  RW_CREATE_TOPICS=true $(PY) -m pytest -q; \
	fi

# deploy/cluster.sh starts a Redis Cluster (3 masters + 3 replicas) and a 3-broker
# Kafka cluster (RF 3, min.insync.replicas 2) in $(CLUSTER_STATE), on KAFKA_CLUSTER_PORT (19920)
# and REDIS_CLUSTER_PORT (19940); the cluster tests run against them (the single services for
# everything else come from deploy/with-services.sh), then the integration suite runs with
# REDIS_URL naming the Redis Cluster; both clusters are stopped afterwards, whatever happened.
CLUSTER_STATE ?= $(or $(RW_CLUSTER_STATE),/tmp/reasonwire-cluster)
CLUSTER_TESTS ?= tests/integration/test_cluster.py
CLUSTER_SUITE ?= tests/integration/test_store.py tests/integration/test_replay_store.py tests/integration/test_normalizer_worker.py tests/integration/test_retention.py
.PHONY: test-cluster
test-cluster: $(STAMP) $(NATIVE) ## start a Redis Cluster (3+3) and a 3-broker Kafka cluster, run the cluster tests and the store suite on them, stop them
	@start=$$(date +%s); \
	env=$$(RW_STATE=$(CLUSTER_STATE) bash deploy/cluster.sh up --redis-cluster --kafka-brokers 3) || { RW_STATE=$(CLUSTER_STATE) bash deploy/cluster.sh down; exit 2; }; \
	kafka=$$(sed -n 's/^KAFKA_BOOTSTRAP_SERVERS=//p' <<<"$$env"); redis=$$(sed -n 's/^REDIS_URL=//p' <<<"$$env"); \
	RW_CREATE_TOPICS=true RW_TEST_CLUSTER_STATE=$(CLUSTER_STATE) RW_TEST_KAFKA_CLUSTER=$$kafka RW_TEST_REDIS_CLUSTER=$$redis bash deploy/with-services.sh $(PY) -m pytest -q $(CLUSTER_TESTS); rc=$$?; \
	if [ $$rc -eq 0 ]; then RW_CREATE_TOPICS=true REDIS_URL=$$redis bash deploy/with-services.sh $(PY) -m pytest -q $(CLUSTER_SUITE); rc=$$?; fi; \
	RW_STATE=$(CLUSTER_STATE) bash deploy/cluster.sh down >/dev/null 2>&1 || true; \
	echo "make test-cluster: exit $$rc in $$(( $$(date +%s) - start ))s"; exit $$rc

test-unit: $(STAMP) $(NATIVE) ## run the tests that need no services
	$(PY) -m pytest -q -m "not integration"

# The main job: Kafka + Redis (a private pair on spare ports, or the ones
# KAFKA_BOOTSTRAP_SERVERS / REDIS_URL name; deploy/with-services.sh),
# the normalizer worker, the sample streams published and the results shown, each run's viewer
# URL on the gateway (deploy/run-demo.sh: kept up until Ctrl-C in a terminal, RW_DEMO_HOLD=1|0
# to choose; stopped at once elsewhere, so CI and the tests end by themselves). Without Java
# (no way to run the broker) it says what to install and translates offline instead.
run: $(STAMP) $(NATIVE) ## the whole pipeline on the sample streams: services, worker, gateway, publish, show; in a terminal the viewer stays up until Ctrl-C
	@if [ -z "$${KAFKA_BOOTSTRAP_SERVERS:-}" ] && ! command -v java >/dev/null; then \
	  echo "make run: no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS, or install Java 17 and Maven (apt-get install openjdk-17-jre-headless maven); translating offline instead"; \
	  $(MAKE) --no-print-directory translate-samples; exit 0; \
	fi; \
	VENV=$(VENV) RW_CREATE_TOPICS=true bash deploy/with-services.sh bash deploy/run-demo.sh

# The gateway's end-to-end tests drive the real @ag-ui/client (Node) and Debian's chromium; they
# skip, saying so, where node / chromium are missing. `make test` runs this first (root, apt).
e2e-deps: ## install what the gateway e2e tests need: Node.js + npm, chromium (apt), the pinned npm packages
	@# only what is missing: a machine whose Node.js and npm come from elsewhere (NodeSource) cannot
	@# take Debian's npm beside them ("held broken packages"), and would then get no chromium either
	@missing=$$(for c in node:nodejs npm:npm chromium:chromium; do command -v $${c%%:*} >/dev/null || printf '%s ' $${c#*:}; done); \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@test -d tests/e2e_node/node_modules || (cd tests/e2e_node && npm ci --no-audit --no-fund --loglevel=error)

# Services as for `make run` (deploy/with-services.sh: the ones KAFKA_BOOTSTRAP_SERVERS / REDIS_URL
# name, else a private pair on spare ports); the gateway creates its topic; Ctrl-C stops it and
# the services it started.
gateway: $(STAMP) $(NATIVE) ## run `reasonwire gateway` (AG-UI SSE, HttpAgent endpoint, HTTP ingress, viewer) on GATEWAY_PORT (8780) until Ctrl-C, services included; keys from RW_GATEWAY_KEYS(_FILE)
	@RW_CREATE_TOPICS=true bash deploy/with-services.sh $(VENV)/bin/reasonwire gateway --port $${GATEWAY_PORT:-8780}

translate-samples: $(STAMP) ## run `reasonwire translate` over the sample streams (tests/fixtures, or RW_SAMPLES), no services
	@mkdir -p out
	@test -n "$(SAMPLES)" || { echo "make translate-samples: no sample streams under $(or $(RW_SAMPLES),tests/fixtures) (expected <grammar>/*.jsonl)"; exit 2; }
	@for f in $(SAMPLES); do \
	  grammar=$$(basename $$(dirname $$f)); \
	  name=$$(basename $$f .jsonl); \
	  if $(VENV)/bin/reasonwire translate --provider $$grammar $$f --artefacts out/$$grammar.$$name.artefacts.jsonl > out/$$grammar.$$name.events.jsonl 2>out/$$grammar.$$name.log; then \
	    printf '== %s/%s: %s AG-UI events, %s artefacts\n' $$grammar $$name $$(wc -l < out/$$grammar.$$name.events.jsonl) $$(wc -l < out/$$grammar.$$name.artefacts.jsonl); \
	    cut -c1-150 out/$$grammar.$$name.events.jsonl | sed 's/^/   /'; \
	  else \
	    printf '== %s/%s: %s\n' $$grammar $$name "$$(tail -1 out/$$grammar.$$name.log)"; \
	  fi; \
	done

BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

# Not part of `make test`. Services as for `make test` (deploy/with-services.sh).
.PHONY: bench
bench: $(BENCH_STAMP) $(NATIVE) ## benchmarks (translator vs JSON floor and LiteLLM, worker vs passthrough, memory); writes bench/results/
	@RW_CREATE_TOPICS=true bash deploy/with-services.sh $(PY) -m bench $(BENCH_ARGS)

.PHONY: bench-scale
bench-scale: $(BENCH_STAMP) $(NATIVE) ## throughput of 1, 2 and 4 normalizer workers in one group (docs/scaling.md); writes bench/results/scale.json
	@RW_CREATE_TOPICS=true bash deploy/with-services.sh $(PY) -m bench.scale $(BENCH_ARGS)

# Not part of `make test` (tests/unit/test_fuzz_short.py runs a short fixed-seed campaign there).
# FUZZ_ARGS e.g. "--events 200000 --grammar bedrock-converse --seed 7"; see `python -m fuzz --help`.
FUZZ_ARGS ?=
.PHONY: fuzz
fuzz: $(STAMP) ## mutation fuzz campaign (1M events per grammar, seeded) + scaling probe; findings to fuzz/findings/
	$(PY) -m fuzz $(FUZZ_ARGS)

clean: ## remove the virtualenv and outputs
	rm -rf $(VENV) out .pytest_cache build

# Not part of `make test`: about 10 minutes, its own Kafka and Redis (ports 19710-19716,
# state /tmp/rw-chaos; CHAOS_KAFKA_PORT / CHAOS_REDIS_PORT / CHAOS_STATE to move them).
.PHONY: chaos
chaos: $(STAMP) $(NATIVE) ## fault and bad-input run of the worker on real services, then broker kills on a 3-broker cluster; one table each (docs/reliability.md)
	$(PY) -m chaos $(CHAOS_ARGS)
	$(PY) -m chaos --kafka-brokers 3 --state /tmp/rw-chaos-cluster --out out/chaos-cluster $(CHAOS_CLUSTER_ARGS)
