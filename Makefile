# pycni: `make demo` shows a pod network on this machine, `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup setup-test demo test test-daemon lint bench clean

setup: $(STAMPS)/system $(STAMPS)/venv

# What the tests need beyond the demo: etcd for the cluster tests, podman and containerd for the
# real-runtime interop tests.
setup-test: setup $(STAMPS)/test-system

$(STAMPS)/system: scripts/setup-system.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup-system.sh
	@touch $@

$(STAMPS)/test-system: scripts/setup-cluster.sh scripts/setup-runtimes.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup-cluster.sh
	bash scripts/setup-runtimes.sh
	@touch $@

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip >/dev/null
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

demo: setup
	$(VENV)/bin/pycni demo

# The whole suite with in-process entry points, then the plugin integration suite again with
# every call going through the warm daemon (the fast forwarders).
test: setup-test
	$(PY) -m pytest -q -p no:cacheprovider tests/unit
	$(PY) -m pytest -q -p no:cacheprovider tests/integration tests/interop
	PYCNI_TEST_MODE=daemon $(PY) -m pytest -q -p no:cacheprovider tests/integration

test-daemon: setup-test
	PYCNI_TEST_MODE=daemon $(PY) -m pytest -q -p no:cacheprovider tests/integration

lint: setup
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

bench: setup
	$(PY) bench/run.py && $(PY) bench/bench_cluster.py
	$(PY) bench/bench_portmap_scale.py
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_cli.py

clean:
	rm -rf $(STAMPS) $(VENV) build src/*.egg-info
