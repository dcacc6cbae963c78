# The two commands of README.md. Everything they need is installed from here.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
CONFIG ?= config.example.toml

.PHONY: run test test-week-ahead lint unit integration bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

run: $(STAMP)
	@mkdir -p var
	$(VENV)/bin/forwarder run --config $(CONFIG)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Two test processes (pytest-xdist), a file's tests in the same one (its module fixtures start
# once): the suite waits mostly on daemons, PostgreSQL and browsers, and took ~9.5 min in one on
# the 2-core CI machine in a slow hour, 5.5 min in two. Every test makes its own ports and dirs.
test: $(STAMP)
	@bash scripts/install-test-deps.sh
	$(MAKE) --no-print-directory lint
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile

# The suite with the clock of the tests and of every daemon they start 8 days ahead: no test may
# depend on the day it runs (libfaketime; FAKETIME_SHIFT=+30d for another shift). Tests that start
# a PostgreSQL server are left out: libfaketime cannot move PostgreSQL 15's clock as a whole (the
# postmaster forks backends and autovacuum workers from its signal handlers, and those run on the
# real clock, so the server writes lines 8 days apart and its lock timeouts never fire). Those tests
# take every time from what the server writes while they run, never a fixed day.
FAKETIME_SHIFT ?= +8d
test-week-ahead: $(STAMP)
	@bash scripts/install-test-deps.sh
	faketime -f "$(FAKETIME_SHIFT)" $(VENV)/bin/pytest -q -p no:cacheprovider -m "not postgres"

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

integration: $(STAMP)
	@bash scripts/install-test-deps.sh
	$(VENV)/bin/pytest -q tests/integration

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache
