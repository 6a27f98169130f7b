# Two commands: `make run` and `make test`. Both create .venv and install what they need.
# `make test` = `make check` (lint, format, strict types of package, tests and bench), then pytest,
# then the instruction-count gate (bench/instructions.py; needs valgrind).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test check lint typecheck bench gate proto docs clean

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

test: check
	$(BIN)/python -m pytest
	$(MAKE) --no-print-directory gate

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
