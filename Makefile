# Set-up is part of every target: a fresh machine needs only Python 3.11 (and Java 17 for Spark).
# `make run` installs what serving needs (the base package); `make test` installs everything
# (every extra and the dev tools). Each install has its own stamp, so `make run` after
# `make test` installs nothing. `make run PORT=8777 HOST=127.0.0.1` picks the address.
PYTHON ?= python3.11
VENV   ?= .venv
HOST   ?= 127.0.0.1
PORT   ?= 8765
DIST   ?= dist
BIN    := $(VENV)/bin
BASE   := $(VENV)/.installed-base
STAMP  := $(VENV)/.installed
EXTRAS := dev,pipeline,cluster,search,vector,sql

.PHONY: run test test-fast lint typecheck pytest pytest-fast bench java-check wheel clean

$(BIN)/python:
	@echo "octosync: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# The base install is done already when everything is (`make run` after `make test`).
$(BASE): pyproject.toml | $(BIN)/python
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $(BASE); else \
	  echo "octosync: installing the server and its clients into $(VENV) (about 70 MB; a minute on a slow link)"; \
	  $(BIN)/python -m pip install --progress-bar off --upgrade pip && \
	  $(BIN)/python -m pip install --progress-bar off -e . && touch $(BASE); fi

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "octosync: installing the server, every extra ($(EXTRAS)) and the dev tools into $(VENV) (about 1.6 GB; several minutes on a slow link)"
	$(BIN)/python -m pip install --progress-bar off --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[$(EXTRAS)]'
	@touch $(STAMP)

java-check:
	@java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])' || \
	  echo "octosync: Java 17 or newer was not found on PATH; the PySpark pipeline and its tests need it."

run: $(BASE)
	$(BIN)/octosync serve --data ./var --insecure-dev --host $(HOST) --port $(PORT)

# One wheel in dist/, with the inspector and the JavaScript client inside (the file's content,
# not the link server/static/octosync.js is in the repository).
wheel: | $(BIN)/python
	rm -f $(DIST)/octosync-*.whl
	$(BIN)/python -m pip wheel --no-deps --wheel-dir $(DIST) .

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP) java-check
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

# Everything but Spark, real peers and browsers (seconds instead of minutes).
pytest-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark and not peer and not browser"

test-fast: lint typecheck pytest-fast

bench: $(STAMP) java-check
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) dist .mypy_cache .pytest_cache .ruff_cache .hypothesis
