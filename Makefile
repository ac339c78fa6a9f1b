# The two commands a new user needs: `make run` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench crash clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m rocketstore.demo ./store

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m mypy
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks
	$(PY) -m mypy

# Peers for benchmarks/compare.py: Python ones from the `bench` extra, redis-server from apt when
# this machine allows it (compare.py skips, with a line saying so, whatever is still missing).
bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	command -v redis-server >/dev/null || (apt-get install -y -qq redis-server >/dev/null 2>&1 \
		|| echo "redis-server could not be installed: compare.py will skip Redis Streams")
	$(PY) benchmarks/put_get.py
	$(PY) benchmarks/compare.py

# The crash harness at full size: 200 kill rounds per mode (SYNC, ASYNC, simulated power loss).
crash: $(STAMP)
	ROCKETSTORE_CRASH_ROUNDS=200 $(PY) -m pytest -m slow tests/crash -q -s

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
