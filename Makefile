# pycni: `make demo` shows a pod network on this machine, `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup setup-test demo test test-daemon test-kernel lint bench dist image clean

# What the demo needs: the Debian packages it runs and pycni with its runtime dependencies only.
setup: $(STAMPS)/system $(STAMPS)/venv

# What the tests need beyond the demo: the dev tools (pytest, hypothesis, linters, plotting),
# etcd for the cluster tests, podman and containerd for the real-runtime interop tests,
# qemu + a Debian kernel + virtme-ng for the full-kernel lane.
setup-test: setup $(STAMPS)/venv-dev $(STAMPS)/test-system $(STAMPS)/vm

$(STAMPS)/system: scripts/setup-system.sh
	@mkdir -p $(STAMPS)
	@echo "setup: Debian packages (only the missing ones; up to a minute on a new machine)"
	@bash scripts/setup-system.sh
	@touch $@

$(STAMPS)/test-system: scripts/setup-cluster.sh scripts/setup-runtimes.sh scripts/setup-image.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup-cluster.sh
	bash scripts/setup-runtimes.sh
	bash scripts/setup-image.sh
	@touch $@

# Not a stamp alone: the kernel lives outside the checkout; the script checks and is quick.
$(STAMPS)/vm: scripts/setup-vm.sh $(STAMPS)/venv-dev FORCE
	@mkdir -p $(STAMPS)
	bash scripts/setup-vm.sh $(PY)
	@touch $@

FORCE:

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@test -x $(PY) || { echo "setup: virtualenv $(VENV) (~3 s)"; $(PYTHON) -m venv $(VENV); }
	@echo "setup: pycni and its runtime dependencies: pip-nftables, prometheus-client (~5 s)"
	@$(PY) -m pip install -q --disable-pip-version-check -e .
	@touch $@

# The dev tools, for make test / lint / bench only (the demo never imports them).
$(STAMPS)/venv-dev: pyproject.toml $(STAMPS)/venv
	@echo "setup: dev tools: pytest, hypothesis, ruff, mypy, import-linter, grpcio-tools, matplotlib, virtme-ng (~30 s)"
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@touch $@

demo: setup
	@echo "demo: three pods on a throwaway node (~3 s)"
	@$(VENV)/bin/pycni demo

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

lint: setup $(STAMPS)/venv-dev
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy src
	$(VENV)/bin/lint-imports

bench: setup $(STAMPS)/venv-dev
	$(PY) bench/run.py && $(PY) bench/bench_cluster.py
	$(PY) bench/bench_portmap_scale.py
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_cli.py
	$(PY) bench/breakdown.py

# A wheel and an sdist in dist/ (docs/install.md): `pip install dist/pycni-*.whl` in any venv.
dist: setup $(STAMPS)/venv-dev
	rm -rf dist
	$(PY) -m build --outdir dist .

# The node image (docs/kubernetes.md): localhost/pycni:VERSION, built with buildah on a local
# Debian base (first time: debootstrap, ~2 min; then cached under /var/cache/pycni-image).
image: setup
	bash scripts/setup-image.sh
	PY=$(PY) bash scripts/build-image.sh

clean:
	rm -rf $(STAMPS) $(VENV) build dist src/*.egg-info
