# Two commands for a newcomer: `make demo` and `make test`. Both set everything up themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEBIAN_PACKAGES := openmpi-bin libopenmpi-dev openssh-server cmake chromium postgresql nodejs $(if $(shell command -v npm),,npm)

export PATH := $(BIN):$(PATH)
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__LAZY_LOAD_PLUGINS := False
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export TFDIST_ARTIFACT_ROOT ?= $(CURDIR)/.demo/artifacts

.PHONY: help setup demo lint test test-unit test-extended docs bench faults wheel clean

help:
	@echo "make demo   set up, then run the example nightly DAG once on real Airflow (2 local TF workers)"
	@echo "make lint   set up, then run ruff (lint and format check), mypy (strict for the spec, the contract and the plan), ESLint and Prettier (the page)"
	@echo "make test   set up, lint, then run the test suite (without the extended set)"
	@echo "make test-unit  set up, then run the unit tier only (no process, cluster, Airflow or browser; under a minute)"
	@echo "make test-extended  set up, then run the extended set: fault drills, scale, the install and mode matrices, the bench smoke run"
	@echo "make bench  set up, then run the benchmarks (BENCH_BUDGET=tiny for a quick check, BENCH_SECTIONS=\"ctr serving\" for some); results in bench/results/"
	@echo "make faults set up, then run the fault-injection suite FAULT_TRIALS times per case; figures in bench/results/faults.md"
	@echo "make docs   set up, then build the docs site (docs/, the spec reference generated from the model) into site/"
	@echo "make wheel  build the package's wheel into dist/ (what the images in docker/ install)"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt docker/build-horovod-wheel.sh package-lock.json
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing Debian packages:" $$missing; \
	  case " $$missing " in *" openssh-server "*) \
	    echo "openssh-server: the stand-in cluster's pods run sshd; the machine's own ssh service stays off" \
	      "(/etc/ssh/sshd_not_to_be_run)"; \
	    $$sudo mkdir -p /etc/ssh && $$sudo touch /etc/ssh/sshd_not_to_be_run || exit 1;; esac; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null \
	    || { echo "could not install $$missing: install them as root, then run make again"; exit 1; }; \
	fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[kubernetes,cpu,s3,gcs,dev]'
	rm -rf airflow_tfdist.egg-info  # the build's leftover: on sys.path (from here) a second copy of the package's metadata
	@echo "Horovod: building the CPU wheel once per machine (a few minutes), then reusing it"
	wheel=$$(bash docker/build-horovod-wheel.sh $(BIN)/python) && $(BIN)/python -m pip install -q -c constraints.txt "$$wheel"
	npm ci --no-audit --no-fund --loglevel=error  # ESLint and Prettier at package-lock.json's versions, in node_modules/
	touch $@

demo: setup
	tfdist demo --logs $(CURDIR)/.demo

# ruff's and mypy's settings are in pyproject.toml ([tool.ruff], [tool.mypy]: the packages it checks, how strictly)
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	npm run --silent lint

# lint first; two test files at a time (pytest-xdist); CI then runs test-extended (with the benchmarks' smoke run)
test: lint
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not bench and not extended"

# the unit tier: what make test runs less the e2e tests (and the fault drills), for the edit-test loop
test-unit: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not e2e and not extended and not bench and not faults"

test-extended: setup
	$(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m extended

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(CURDIR)/site

BENCH_BUDGET ?= full
BENCH_OUT ?= $(CURDIR)/bench/results
BENCH_SECTIONS ?=
bench: setup
	$(BIN)/python -m bench.run --budget $(BENCH_BUDGET) --out $(BENCH_OUT) $(if $(BENCH_SECTIONS),--sections $(BENCH_SECTIONS))

FAULT_TRIALS ?= 5
faults: setup
	rm -f $(BENCH_OUT)/faults.jsonl
	TFDIST_FAULT_TRIALS=$(FAULT_TRIALS) TFDIST_FAULT_FIGURES=$(BENCH_OUT)/faults.jsonl \
	  $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -m faults
	$(BIN)/python -m bench.faults --figures $(BENCH_OUT)/faults.jsonl --out $(BENCH_OUT)

wheel: setup
	rm -rf dist
	$(BIN)/python -m build --wheel --outdir dist

clean:
	rm -rf $(VENV) .airflow .demo dist site node_modules
