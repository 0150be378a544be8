# Two commands for a newcomer: `make demo` and `make test`. Both set everything up themselves.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export PATH := $(BIN):$(PATH)
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER := $(CURDIR)/dags
export AIRFLOW__CORE__PLUGINS_FOLDER := $(CURDIR)/plugins
export AIRFLOW__CORE__LOAD_EXAMPLES := False
export TFDIST_ARTIFACT_ROOT ?= $(CURDIR)/.demo/artifacts

.PHONY: help setup demo test clean

help:
	@echo "make demo   set up, then run the example nightly DAG once on real Airflow (2 local TF workers)"
	@echo "make test   set up, then run the test suite"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[trainer,dev]'
	touch $@

demo: setup
	tfdist demo --logs $(CURDIR)/.demo

test: setup
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .airflow .demo
