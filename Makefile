# pycni: `make demo` shows a pod network on this machine, `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup setup-test demo test test-daemon test-kernel lint bench clean

setup: $(STAMPS)/system $(STAMPS)/venv

# What the tests need beyond the demo: etcd for the cluster tests, podman and containerd for the
# real-runtime interop tests, qemu + a Debian kernel + virtme-ng for the full-kernel lane.
setup-test: setup $(STAMPS)/test-system $(STAMPS)/vm

$(STAMPS)/system: scripts/setup-system.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup-system.sh
	@touch $@

$(STAMPS)/test-system: scripts/setup-cluster.sh scripts/setup-runtimes.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup-cluster.sh
	bash scripts/setup-runtimes.sh
	@touch $@

# Not a stamp alone: the kernel lives outside the checkout; the script checks and is quick.
$(STAMPS)/vm: scripts/setup-vm.sh $(STAMPS)/venv FORCE
	@mkdir -p $(STAMPS)
	bash scripts/setup-vm.sh $(PY)
	@touch $@

FORCE:

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
	$(PY) -m pytest -q -p no:cacheprovider tests/fullkernel

# The full-kernel lane alone (docs/full-kernel-lane.md): on a kernel without 8021q, ipvlan,
# dummy, vrf, wireguard, ipip or bridge VLAN filtering it boots one qemu guest for the lot.
test-kernel: setup-test
	$(PY) -m pytest -q -p no:cacheprovider tests/fullkernel

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
