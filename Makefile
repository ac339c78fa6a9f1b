# The two commands a new user needs: `make run` and `make test`. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint bench crash fuzz clean java jdk node

# (after `java`: warm also records the class archive local Spark jobs start from)
$(STAMP): pyproject.toml setup.py | java
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,fuzz]'
	$(PY) -m rocketstore.warm
	touch $(STAMP)

# Spark (rocketstore.spark, `rocketstore spark`) runs on Java 17+: install a headless JRE when
# `java` is missing and this machine lets us (root or password-less sudo, Debian/Ubuntu).
java:
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless for Spark"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
		( $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jre-headless ) >/dev/null 2>&1 \
			|| echo "could not install Java: the Spark tests cannot run here"; }

# The remoting tests (tests/remoting) compile small Java client programs: install a JDK when `javac`
# is missing, as above (they skip, saying why, without one; or without ROCKETMQ_HOME).
jdk:
	@command -v javac >/dev/null 2>&1 || { \
		echo "javac not found: installing openjdk-17-jdk-headless for the Java client tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
		( $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq openjdk-17-jdk-headless ) >/dev/null 2>&1 \
			|| echo "could not install a JDK: the Java client tests cannot run here"; }

# The official Node.js client for tests/broker/test_node.py, pinned by its package-lock.json; the
# test skips, saying why, on a machine without npm.
NODE_CLIENT := tests/broker/node/node_modules/.package-lock.json
$(NODE_CLIENT): tests/broker/node/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix tests/broker/node --no-audit --no-fund --silent && touch $@; \
	else echo "npm not found: the Node.js client test will skip"; fi

node: $(NODE_CLIENT)

run: $(STAMP) java
	$(PY) -m rocketstore.demo ./store

test: $(STAMP) java jdk node
	$(PY) -m ruff check src tests benchmarks fuzz
	$(PY) -m mypy
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check src tests benchmarks fuzz
	$(PY) -m ruff format --check src tests benchmarks fuzz
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

# Every fuzz target in fuzz/ for FUZZ_SECONDS each, one after the other (atheris, from the fuzz
# extra); a table of runs and coverage at the end, findings in fuzz/crashes/. See docs/fuzzing.md.
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,fuzz]'
	$(PY) fuzz/run_all.py --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
