# `make check` is the main job; every target bootstraps .venv on a fresh machine.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

# The TypeScript adapter kit's packages (Node 20+; better-sqlite3 compiles once). Without Node, the kit's tests skip
# (under CI they fail: .ci/run installs Node).
KIT       := adapters/typescript
KIT_STAMP := $(KIT)/node_modules/.installed

.PHONY: check test nightly diagrams clean kit

check: $(STAMP)
	$(BIN)/envreplica check

# pytest-xdist: one worker per CPU, each test file on one worker (its module fixtures computed once).
test: $(STAMP) kit
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

kit:
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory $(KIT_STAMP); \
	else echo "note: no Node.js here, so the TypeScript kit's tests will skip (Node 20+ runs them)"; fi

$(KIT_STAMP): $(KIT)/package.json $(KIT)/package-lock.json
	cd $(KIT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info .hypothesis .pytest_cache $(KIT)/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
