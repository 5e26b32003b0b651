# gpunode: the README's commands.
PYTHON ?= python3

.PHONY: install test unit lint lab lab-up lab-down

install:
	$(PYTHON) -m pip install -e '.[test]'

lint:
	ruff check .

unit:
	$(PYTHON) -m pytest tests/unit -q

# The test command (CI runs it): lint, unit tier, lab tier (QEMU guest, real kernel).
test: lint
	$(PYTHON) -m pytest -q -rs

# The demo on the bundled lab node: build/reuse image, boot, --dry, apply, reboot, re-run, audit.
lab: install
	$(PYTHON) -m lab demo

lab-up:
	$(PYTHON) -m lab up

lab-down:
	$(PYTHON) -m lab down
