# `make check` is the main job; every target bootstraps .venv on a fresh machine.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: check test nightly diagrams clean

check: $(STAMP)
	$(BIN)/envreplica check

# pytest-xdist: one worker per CPU, each test file on one worker (its module fixtures computed once).
test: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -n auto --dist loadfile -m "not nightly" tests

# The full-size runs CI leaves out (tests marked nightly), for a nightly job.
nightly: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -m nightly tests

diagrams: $(STAMP)
	mkdir -p docs
	$(BIN)/envreplica diagram --format svg --output docs/gate.svg
	$(BIN)/envreplica diagram --format png --output docs/gate.png

# Reinstalls only when pyproject.toml changes (the install is editable).
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info .hypothesis .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
