# gpunode: the README's commands. They run from the project's own virtual environment (.venv,
# made on first use with the system python3's venv module): the system Python is never touched.
PYTHON ?= python3
# The lab guest's Debian suite: trixie (Debian 13, Proxmox VE 9's base) or bookworm (Debian 12).
SUITE ?= trixie
# What `make test-lab` runs (CI: the deploy -> reboot -> zero-change cycle on bookworm).
LAB_TESTS ?= tests/lab
export GPUNODE_LAB_SUITE := $(SUITE)
VENV ?= .venv
PY := $(VENV)/bin/python
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

.PHONY: dist install venv test test-lab unit lint typecheck docs lab lab-up lab-down

install venv: $(VENV)/.installed

# Debian ships the venv module apart (python3-venv): installed with apt-get when missing (root).
# pip's full output goes to $(VENV)/pip.log; the terminal gets one line per package.
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip' 2>/dev/null || { \
	  echo "[make] $(PYTHON) has no venv module: apt-get install python3-venv"; \
	  [ "$$(id -u)" = 0 ] || { echo "[make] not root: run 'apt-get install python3-venv' as root,"\
	    "or make PYTHON=/path/to/python3"; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null || { \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv \
	    >/dev/null; }; }
	@$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); \
	  echo "[make] creating $(VENV) with $$($(PYTHON) --version) ($(PYTHON))"; \
	  $(PYTHON) -m venv $(VENV); }
	@echo "[make] installing gpunode and its test tools into $(VENV) (full log: $(VENV)/pip.log)"
	@$(PY) -m pip install --disable-pip-version-check -e '.[test]' 2>&1 | tee $(VENV)/pip.log \
	  | awk '/^(Collecting|Successfully installed)/ { print "  pip: " substr($$0, 1, 90); fflush() }'
	@touch $@

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

unit: $(VENV)/.installed
	$(PY) -m pytest tests/unit -q

# The settings text of docs/ and each role's defaults.py, and the profile's JSON Schema
# (gpunode/schema/node-profile.schema.json), from the pydantic schema (tools/docs.py).
docs: $(VENV)/.installed
	$(PY) -m tools.docs

# mypy with the pydantic plugin ([tool.mypy] in pyproject.toml): the package and lab/.
typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

# The test command (CI runs it): lint, types, the unit tier with a coverage report of gpunode
# ([tool.coverage] in pyproject.toml; its pyinfra CLI runs count too), then the lab tier on
# $(SUITE) (QEMU guest, real kernel), untraced: coverage's tracer cost each of its dozens of
# pyinfra runs ~1.1 s wall and ~1.5 s CPU on the 2-core CI machine, beside the TCG guest.
test: lint typecheck
	$(PY) -m pytest tests/unit -q -rs --durations=5 --cov
	$(PY) -m pytest tests/lab -q -rs --durations=15

# The lab tier alone (CI runs it once more with SUITE=bookworm).
test-lab: $(VENV)/.installed
	$(PY) -m pytest $(LAB_TESTS) -q -rs --durations=10

# The demo on the bundled lab node: build/reuse image, boot, --dry, apply, reboot, re-run, audit.
lab: $(VENV)/.installed
	$(PY) -m lab demo

lab-up: $(VENV)/.installed
	$(PY) -m lab up

lab-down: $(VENV)/.installed
	$(PY) -m lab down

# The release artefacts: an sdist and a wheel in dist/, checked by twine.
dist: $(VENV)/.installed
	$(PY) -m pip install -q build twine
	rm -rf dist && $(PY) -m build -o dist . && $(VENV)/bin/twine check --strict dist/*
