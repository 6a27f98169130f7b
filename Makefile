# Two commands: `make run` and `make test`. Both create .venv and install what they need.
# `make test` = tests/prereqs.sh (redis-server, a Redis answering, valgrind, chromium: installed
# with apt-get when it may, else the exact command to run), then pytest on $(WORKERS) worker
# processes with `make check` (lint, format, strict types) and the instruction-count gate
# (bench/instructions.py, valgrind) beside it. Every skip fails it (CHORUS_TEST_STRICT=1).
# `make test-fast` = the tests that start no process (-m "not e2e"), for the inner loop.
# docs/development.md says more.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

# pytest-xdist workers: two per CPU, at most 16 (`make test WORKERS=2` to choose). The suite
# waits on processes and timers more than it computes: at two workers per CPU `make test` takes
# about 9 minutes on a quiet 2-core machine, at one per CPU 16 (BENCHMARKS.md, "Issue 33 item
# 7"). Tests that wait do so on conditions, so the contention of more workers than CPUs does
# not fail them.
# Python may write bytecode here even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): pytest then keeps each test module's assertion rewrite in
# __pycache__ instead of every worker redoing it for every run (about 6 s of CPU per worker).
WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); w=$$((n * 2)); echo $$((w > 16 ? 16 : w)))
PYTEST  := CHORUS_TEST_STRICT=1 PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

.PHONY: run test suite test-fast prereqs check lint typecheck bench gate proto docs clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Chorus needs Python 3.11 or newer; run: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed-all: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) --upgrade pip
	$(PIP) -c constraints.txt -e '.[all]'
	@touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) --upgrade pip
	$(PIP) -c constraints.txt -e '.[dev]'
	@touch $@ $(VENV)/.installed-all

run: $(VENV)/.installed-all
	$(BIN)/chorus run

# pytest in the foreground (its progress live); beside it, `make check` and (for `make test`) the
# gate, whose outputs are shown after the tests. The workers' Redis servers are their own
# (tests/conftest.py), so the gate's database 13 on 127.0.0.1:6379 is its alone.
# `make suite` is the same without the gate.
test: BESIDE := check gate
suite: BESIDE := check
test suite: prereqs $(VENV)/.installed-dev
	@log=$$(mktemp); \
	($(MAKE) --no-print-directory -j2 --output-sync=target $(BESIDE) >$$log 2>&1; echo $$? >$$log.rc) & \
	$(PYTEST); tests=$$?; wait; beside=$$(cat $$log.rc); \
	echo "== make $(BESIDE): exit $$beside =="; cat $$log; rm -f $$log $$log.rc; \
	test $$tests -eq 0 -a $$beside -eq 0

test-fast: $(VENV)/.installed-dev
	$(PYTEST) -m "not e2e"

prereqs:
	@tests/prereqs.sh

# Instructions per answered message (valgrind) against bench/instructions.json: fails on +10%.
gate: $(VENV)/.installed-dev
	$(BIN)/python -m bench.instructions --check

check: lint typecheck

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# strict, over bot, adapters, insights, prompts, tests and bench (pyproject [tool.mypy])
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

# Regenerate the committed YouTube streamList stubs from the vendored proto (grpcio-tools);
# tests/test_youtube_proto.py fails while they are stale.
proto: $(VENV)/.installed-dev
	$(BIN)/python -m adapters.youtube._proto.generate

# The documentation site (mkdocs.yml, docs/) into site/: the settings reference is generated from
# bot/settings first; --strict fails on a broken link or a page missing from the nav.
docs: $(VENV)/.installed-dev
	$(BIN)/python -m bot.settings.reference docs/reference/settings.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache site
