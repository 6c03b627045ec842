# `make check` is the main job; every target bootstraps .venv on a fresh machine.
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

# The TypeScript adapter kit's packages (Node 20+; better-sqlite3 compiles once). Without Node, the kit's tests skip
# (under CI they fail: .ci/run installs Node).
KIT       := adapters/typescript
KIT_STAMP := $(KIT)/node_modules/.installed
# The JavaScript migration kit's packages (adapters/javascript: the second seed's own code behind the migration
# adapter protocol; better-sqlite3 stands in for node:sqlite on Node 20).
JSKIT       := adapters/javascript
JSKIT_STAMP := $(JSKIT)/node_modules/.installed

# The import package's subpackages, one per top-level folder (pyproject.toml maps envreplica.X to X/).
PACKAGES := spec model checker impl conformance cli report reliability

.PHONY: check test test-slow test-all typecheck docs docs-serve nightly diagrams clean kit kit-test compiled

check: compiled
	$(BIN)/envreplica check

# The checker's hot path compiled by mypyc (setup.py; spec/compiled.py lists the modules and says how a process
# chooses them): built by pip install, rebuilt here when a source changed since; without a C compiler (or with
# ENVREPLICA_PURE_PYTHON=1) setup.py says why in one line and everything runs interpreted.
compiled: $(STAMP)
	@$(BIN)/python -c 'import sys; from envreplica.spec.compiled import choose; sys.exit(not choose().compiled)' \
	  2>/dev/null || $(BIN)/python setup.py -q build_ext --inplace

# The suite in tiers (issue 41). Each runs mypy's or pytest's part on the interpreted model
# (ENVREPLICA_PURE_PYTHON=1): the model mutants rewrite the model's functions, which only interpreted code lets
# them; tests/test_compiled.py runs the compiled build beside it and holds the two to the same answers.
# - make test: the fast tier a contributor runs before each commit (mypy, then every test not marked slow or
#   nightly: every test file is in it, the long batteries at the dev budget, tests/budget.py).
# - make test-slow: the tests marked slow (the long lockstep, kit and model-check runs, the packaging install).
# - make test-all: both tiers in one pytest session (make test TIER=all: mypy, then every test not marked
#   nightly), at CI's budget on any machine (ENVREPLICA_TEST_BUDGET=ci): what .ci/run runs. One session, not
#   two one after the other: the heaviest files of both tiers go first and the light ones fill in at the end, so
#   neither worker waits out the other's last long file twice. No catch lives only in make nightly or nowhere:
#   every mutant battery is in make test-all.
# pytest: pytest-xdist runs one worker per CPU, each test file on one worker (its module fixtures computed
# once); a test class is a unit of its own (--dist loadscope), which is how a long battery is split over the
# workers (tests/test_conformance_mutants.py's two halves). The heaviest files go first (tests/durations.json,
# tests/conftest.py; --no-loadscope-reorder keeps that order rather than xdist's by number of tests), so that no
# long file is drawn last while the other worker idles; the others follow in collection order. A random order
# (pytest-randomly, installed; it prints "Using --randomly-seed=N") is one argument away: make test
# PYTEST_ARGS="-p randomly" (replay one with PYTEST_ARGS="-p randomly --randomly-seed=N"); CI runs it so. Every
# test passes alone and in any order.
PYTEST_ARGS ?=
PYTEST := ENVREPLICA_PURE_PYTHON=1 $(BIN)/pytest -p no:cacheprovider -p no:randomly -n auto --dist loadscope \
  --no-loadscope-reorder
#: make test's tier (TIER=all is make test-all's), and the tests each tier runs (pytest -m).
TIER ?= fast
TIER_MARKS_fast := not nightly and not slow
TIER_MARKS_all := not nightly
test: typecheck kit compiled
	$(if $(TIER_MARKS_$(TIER)),,$(error TIER=$(TIER) names no tier of make test: fast (the default) or all))
	$(PYTEST) -m "$(TIER_MARKS_$(TIER))" $(PYTEST_ARGS) tests

test-slow: kit compiled
	$(PYTEST) -m "slow and not nightly" $(PYTEST_ARGS) tests

test-all: export ENVREPLICA_TEST_BUDGET ?= ci
test-all:
	$(MAKE) test TIER=all

# mypy over the whole package (settings in pyproject.toml). mypy cannot follow setuptools' package-dir mapping,
# so it runs from docs/.api, whose envreplica/ links name each folder by its import name (mkdocstrings reads the
# same tree); paths print relative to the repository.
typecheck: $(STAMP)
	@cd docs/.api && "$(CURDIR)/$(BIN)/mypy" --config-file "$(CURDIR)/pyproject.toml" \
	  --cache-dir "$(CURDIR)/$(VENV)/mypy-cache" $(addprefix -p envreplica.,$(PACKAGES)) > "$(CURDIR)/$(VENV)/mypy.out"; \
	  status=$$?; sed 's#^envreplica/##' "$(CURDIR)/$(VENV)/mypy.out"; exit $$status

# The documentation site (mkdocs.yml, docs/), built with --strict: a broken link or a page left out of the
# navigation fails. docs-serve previews it at http://127.0.0.1:8000.
DOCS_STAMP := $(VENV)/.docs-installed
docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

docs-serve: $(DOCS_STAMP)
	$(BIN)/mkdocs serve

# ENVREPLICA_PURE_PYTHON=1: the reinstall adds the docs' packages only; the compiled model already built in place
# (make compiled) stays as it is, rather than being compiled again.
$(DOCS_STAMP): $(STAMP)
	ENVREPLICA_PURE_PYTHON=1 $(BIN)/pip install --quiet -e '.[docs]'
	touch $@

# The full-size runs CI leaves out (tests marked nightly), for a nightly job.
nightly: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -m nightly tests

diagrams: $(STAMP)
	mkdir -p docs
	$(BIN)/envreplica diagram --format svg --output docs/gate.svg
	$(BIN)/envreplica diagram --format png --output docs/gate.png
	$(BIN)/python tests/architecture.py  # docs/architecture.svg: who imports whom (docs/architecture.md)

# Reinstalls only when pyproject.toml changes (the install is editable).
# EXTRAS: the optional extras installed beside the tests' (.ci/run adds ray in the same install, so that the
# mypyc build runs once, not once per pip install).
EXTRAS ?= test
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	touch $@

# `npm ci` builds the TypeScript kit's dist/ (its `prepare` script); `build.mjs --if-stale` builds it again after an
# edit of its src/. The two kits install side by side (-j2): each compiles better-sqlite3 from source where no
# prebuilt binary can be downloaded, a minute or two of one core.
kit:
	@if command -v npm >/dev/null 2>&1; then $(MAKE) --no-print-directory -j2 $(KIT_STAMP) $(JSKIT_STAMP) && \
	  (cd $(KIT) && node scripts/build.mjs --if-stale); \
	else echo "note: no Node.js here, so the TypeScript and JavaScript kits' tests will skip (Node 20+ runs them)"; fi

# The kits' own tests alone (node --test in each kit): the TypeScript kit's test host, its no-cast glue and its
# type-check of --source (those need the seed's file: ENVREPLICA_SEED_SOURCE, else they skip), and the JavaScript
# migration kit's. `make test` runs them too, through pytest.
kit-test: kit
	cd $(KIT) && npm test
	cd $(JSKIT) && npm test

$(KIT_STAMP): $(KIT)/package.json $(KIT)/package-lock.json
	cd $(KIT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(JSKIT_STAMP): $(JSKIT)/package.json $(JSKIT)/package-lock.json
	cd $(JSKIT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) build dist site *.egg-info .hypothesis .pytest_cache $(KIT)/node_modules $(KIT)/dist $(JSKIT)/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	find spec model checker -name '*.so' -delete; rm -f spec/compiled.json
