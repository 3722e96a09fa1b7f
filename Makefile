# Set-up and everyday entry points. Every target installs what it needs, idempotently:
# system packages (apt), the Python environment (.venv), Cassandra (Maven Central, cached).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .make
PYTEST_ARGS ?=

.PHONY: install system python cassandra gateway test unit sweep bench clean-testbed

install: cassandra gateway

system:
	bash scripts/install-system.sh

python: system $(STAMPS)/python
$(STAMPS)/python: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	mkdir -p $(STAMPS) && touch $@

cassandra: python
	$(PY) -m testbed dist install

# The netem gateway VM image (kernel, busybox, ip/tc) from Debian packages; cached.
gateway: python
	$(PY) -m emulation gateway build

# The whole suite: unit tests, then integration tests on real namespaces and Cassandra.
test: install
	$(PY) -m pytest -ra $(PYTEST_ARGS) tests/unit tests/integration

unit: python
	$(PY) -m pytest -ra tests/unit

# The main job. Until the sweep (issue 4) lands, this brings a 3-node testbed up, writes
# from the endpoint, and tears it down.
sweep: install
	$(PY) -m experiments.smoke

bench: install
	$(PY) benchmarks/bringup.py

clean-testbed: python
	$(PY) -m testbed clean
