# reasonwire — every target does its own set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FIXTURES ?= $(abspath ../shared/fixtures)

.DEFAULT_GOAL := help
.PHONY: help install services services-down test test-unit run translate-samples clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP) ## create .venv and install reasonwire with its test dependencies

services: ## start Kafka (KRaft, from Maven Central) and Redis on 127.0.0.1, idempotent
	bash deploy/services.sh up

services-down: ## stop the local Kafka and Redis
	bash deploy/services.sh down

# Starts the services unless KAFKA_BOOTSTRAP_SERVERS / REDIS_URL name running ones,
# and stops afterwards only what it started itself.
test: $(STAMP) ## run every test (unit, conformance, integration), services included
	@if bash deploy/services.sh status >/dev/null 2>&1; then started=no; else started=yes; fi; \
	set -a; eval "$$(bash deploy/services.sh up)"; set +a; \
	$(PY) -m pytest -q; rc=$$?; \
	if [ "$$started" = yes ] && [ -z "$${KEEP_SERVICES:-}" ]; then bash deploy/services.sh down >/dev/null 2>&1 || true; fi; \
	exit $$rc

test-unit: $(STAMP) ## run the tests that need no services
	$(PY) -m pytest -q -m "not integration"

# The main job: Kafka + Redis (local, or the ones KAFKA_BOOTSTRAP_SERVERS / REDIS_URL name),
# the normalizer worker, the sample streams published and the results shown. Without Java
# (no way to run the broker) it says what to install and translates offline instead.
run: $(STAMP) ## the whole pipeline on the sample streams: services, worker, publish, show, stop
	@if [ -z "$${KAFKA_BOOTSTRAP_SERVERS:-}" ] && ! command -v java >/dev/null; then \
	  echo "make run: no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS, or install Java 17 and Maven (apt-get install openjdk-17-jre-headless maven); translating offline instead"; \
	  $(MAKE) --no-print-directory translate-samples; exit 0; \
	fi; \
	if bash deploy/services.sh status >/dev/null 2>&1; then started=no; else started=yes; fi; \
	set -a; eval "$$(bash deploy/services.sh up)"; set +a; \
	RW_SAMPLES=$(FIXTURES) $(VENV)/bin/reasonwire demo; rc=$$?; \
	if [ "$$started" = yes ] && [ -z "$${KEEP_SERVICES:-}" ]; then bash deploy/services.sh down >/dev/null 2>&1 || true; fi; \
	exit $$rc

translate-samples: $(STAMP) ## run `reasonwire translate` over every sample stream in ../shared/fixtures
	@mkdir -p out
	@for dir in $(FIXTURES)/*/; do \
	  grammar=$$(basename $$dir); \
	  for f in $$dir*.jsonl; do \
	    name=$$(basename $$f .jsonl); \
	    if $(VENV)/bin/reasonwire translate --provider $$grammar $$f --artefacts out/$$grammar.$$name.artefacts.jsonl > out/$$grammar.$$name.events.jsonl 2>out/$$grammar.$$name.log; then \
	      printf '== %s/%s: %s AG-UI events, %s artefacts\n' $$grammar $$name $$(wc -l < out/$$grammar.$$name.events.jsonl) $$(wc -l < out/$$grammar.$$name.artefacts.jsonl); \
	      cut -c1-150 out/$$grammar.$$name.events.jsonl | sed 's/^/   /'; \
	    else \
	      printf '== %s/%s: %s\n' $$grammar $$name "$$(tail -1 out/$$grammar.$$name.log)"; \
	    fi; \
	  done; \
	done

BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(BENCH_STAMP)

# Not part of `make test`. Starts the services unless KAFKA_BOOTSTRAP_SERVERS / REDIS_URL
# name running ones, and stops afterwards only what it started itself (as `make test`).
.PHONY: bench
bench: $(BENCH_STAMP) ## benchmarks (translator vs JSON floor and LiteLLM, worker vs passthrough, memory); writes bench/results/
	@if bash deploy/services.sh status >/dev/null 2>&1; then started=no; else started=yes; fi; \
	set -a; eval "$$(bash deploy/services.sh up)"; set +a; \
	$(PY) -m bench $(BENCH_ARGS); rc=$$?; \
	if [ "$$started" = yes ] && [ -z "$${KEEP_SERVICES:-}" ]; then bash deploy/services.sh down >/dev/null 2>&1 || true; fi; \
	exit $$rc

# Not part of `make test` (tests/unit/test_fuzz_short.py runs a short fixed-seed campaign there).
# FUZZ_ARGS e.g. "--events 200000 --grammar bedrock-converse --seed 7"; see `python -m fuzz --help`.
FUZZ_ARGS ?=
.PHONY: fuzz
fuzz: $(STAMP) ## mutation fuzz campaign (1M events per grammar, seeded) + scaling probe; findings to fuzz/findings/
	$(PY) -m fuzz $(FUZZ_ARGS)

clean: ## remove the virtualenv and outputs
	rm -rf $(VENV) out .pytest_cache
