# Set-up and everyday entry points. Every target installs what it needs, idempotently:
# system packages (apt), the Python environment (.venv), Cassandra (Maven Central, cached).
# `make sweep` installs what a sweep on namespaces needs (core: the Python core, no
# extra); the VM backend and the netem gateway VM (vms, with the vms extra) and YCSB
# (ycsb) are installed by their own targets, and all of it, every extra and the
# development tools by `make install`, which `make test` runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMPS := .make
PYTEST_ARGS ?=

.PHONY: install core vms ycsb system system-vms system-ycsb system-tests system-dev python \
	python-vms python-all cassandra shaper gateway image lint test unit sweep bench clean-testbed

install: core vms ycsb python-all
	$(PY) -m testbed check

# A sweep on namespaces: Cassandra and the host shaper's delayer (for kernels without
# sch_netem; where netem exists the sweep shapes with tcconfig and never runs it).
core: cassandra shaper
	$(PY) -m testbed check cassandra
	$(PY) -m emulation shaper check

# The libvirt backend (VM image, libvirtd) and the netem gateway VM (--shaper gateway).
vms: python-vms image gateway
	$(PY) -m testbed check libvirt qemu image
	$(PY) -m emulation gateway check

system:
	bash scripts/install-system.sh core

system-vms: system
	bash scripts/install-system.sh vms

system-ycsb: system
	bash scripts/install-system.sh ycsb

system-tests: system
	bash scripts/install-system.sh tests

system-dev: system
	bash scripts/install-system.sh dev

# The Python environment: the core (python), with the vms extra (python-vms), or with
# every extra and the development tools (python-all; pyproject.toml, common/extras.py).
python: system $(STAMPS)/python
$(STAMPS)/python: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	mkdir -p $(STAMPS) && touch $@

python-vms: python system-dev $(STAMPS)/python-vms
$(STAMPS)/python-vms: pyproject.toml $(STAMPS)/python
	$(PY) -m pip install -q -e '.[vms]'
	touch $@

python-all: python system-dev $(STAMPS)/python-all
$(STAMPS)/python-all: pyproject.toml $(STAMPS)/python
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $@

cassandra: python
	$(PY) -m testbed dist install

# YCSB and the Java driver (Maven Central) and the project's CQL binding (javac); cached.
ycsb: python system-ycsb
	$(PY) -m workloads.ycsb install

# The host shaper's delayer (C, libnetfilter_queue; ~1 s; cached on its source): the
# default shaper where the kernel has no sch_netem.
shaper: python
	$(PY) -m emulation shaper build

# The netem gateway VM image (kernel, busybox, ip/tc) from Debian packages; cached.
gateway: python system-vms
	$(PY) -m emulation gateway build

# The VM base image of the libvirt backend (debootstrap; ~2 min; cached on its inputs).
image: cassandra system-vms
	$(PY) -m testbed image build

# Lint, format and type check of the whole tree (configured in pyproject.toml); CI runs
# it first.
lint: python-all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The whole suite: unit tests and integration tests on real namespaces and Cassandra in
# one pytest session, the parallel and worker sweeps, the faults and the ownership test
# (test_7, test_8, test_3e, test_6) in a second beside it, then the VM tests (test_4, test_5: TCG guests) alone (tests/support/suite.py, docs/testing.md); each lists its
# slowest tests at the end, to keep the suite under its time budget. PYTEST_ARGS that
# name tests run those in one session, as pytest would.
test: install system-tests
	$(PY) -m tests.support.suite $(PYTEST_ARGS)

unit: python-all system-tests
	$(PY) -m pytest -ra tests/unit

# The main job: the seed paper's sweep (396 cells, ~14 h on 2 cores, 1 testbed; resumable:
# rerun to continue), then the figures, the comparison with φ and the HTML report. It
# starts with a ~11-minute preview (every RF and loss at 0/50/100 ms, 30 writes a cell:
# results/preview/report.html), then measures 0/50/100 ms first and writes
# results/report.html once those are stored, refreshed every 15 minutes.
# `make sweep SWEEP_ARGS=--quick` runs the ~13-minute preset instead (times measured on
# 2 cores: docs/measured.md, "Times"; SWEEP_ARGS="... --dry-run": yours, no figures).
SWEEP_ARGS ?= --config experiments/configs/paper.toml --preview
RESULTS ?= results
sweep: core
	$(PY) -m experiments.sweep $(SWEEP_ARGS) --out $(RESULTS)
	@case " $(SWEEP_ARGS) " in *" --dry-run "*|*" --help "*|*" -h "*) exit 0;; esac; \
	  echo "$(PY) -m analysis.plots $(RESULTS) --no-report"; \
	  $(PY) -m analysis.plots $(RESULTS) --no-report && \
	  echo "$(PY) -m analysis.compare $(RESULTS)" && $(PY) -m analysis.compare $(RESULTS)

bench: core
	$(PY) benchmarks/bringup.py
	$(PY) benchmarks/plots.py

clean-testbed: python
	$(PY) -m testbed clean
