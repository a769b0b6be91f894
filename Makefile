# Set-up is part of every target: a fresh machine needs only Python 3.11 (and Java 17 for Spark).
# Everything is installed (server, pipeline and cluster extras, dev tools); `make run PORT=8777`.
PYTHON ?= python3.11
VENV   ?= .venv
HOST   ?= 127.0.0.1
PORT   ?= 8765
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast lint typecheck pytest pytest-fast bench java-check clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,pipeline,cluster,search,vector,sql]'
	@touch $(STAMP)

java-check:
	@java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])' || \
	  echo "octosync: Java 17 or newer was not found on PATH; the PySpark pipeline and its tests need it."

run: $(STAMP) java-check
	$(BIN)/octosync serve --data ./var --insecure-dev --host $(HOST) --port $(PORT)

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
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
