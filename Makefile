# The two entry points a newcomer needs are `make demo` and `make test` (see README.md).
# Everything else here is what those two need: a virtualenv, the C limiter, the control plane.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit venv clean k8s native helm image manifests realnode prometheus chromium

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The product on a local dev cluster (docs/views.md "make demo"): builds the control plane on
# first use, plays the built-in demo, prints `gpupool status` and the web view's URL; Ctrl-C (or
# DEMO_ARGS=--once) takes it all down. `gpupool simulate` stays the simulator's one command.
demo: venv k8s
	$(BIN)/gpupool demo $(DEMO_ARGS)

lint: venv
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools
	$(BIN)/mypy
	$(BIN)/lint-imports

# Everything but the tests that need the control plane binaries or build the image.
unit: venv
	tools/helm/build.sh >/dev/null || echo "make unit: helm cannot be built here; the chart's tests skip"
	tools/prometheus/install.sh || echo "make unit: promtool cannot be installed here; its tests skip"
	$(BIN)/pytest -m "not e2e and not image"

# The suite on $(WORKERS) pytest-xdist workers, one test file per work unit (tests/conftest.py
# says how the real-node and image tests stay on one worker).
WORKERS ?= 2
test: lint k8s native helm realnode prometheus chromium
	$(BIN)/pytest -n $(WORKERS)

# The real control plane for e2e tests and `gpupool dev-cluster` (etcd, kube-apiserver,
# kube-scheduler, kubectl, kwok) built from Go modules into ~/.cache/gpupool/k8s/<versions>/bin
# ($GPUPOOL_K8S_BIN overrides); a no-op when already built.
k8s:
	tools/k8s/build.sh

# helm, built from helm.sh/helm/v3 into ~/.cache/gpupool/helm/<version>/bin ($GPUPOOL_HELM_BIN
# overrides); the chart's tests lint and render deploy/helm/gpupool with it. A no-op when built.
helm:
	tools/helm/build.sh

# deploy/'s plain manifests, rendered from the chart deploy/helm/gpupool (edit the chart, then this).
manifests: venv helm
	$(BIN)/python tools/helm/render_manifests.py

# The image (Dockerfile) built with buildah on a local mmdebstrap Debian base, exported as an OCI
# archive for `ctr -n k8s.io images import`; prints its path. Root, buildah, mmdebstrap; a no-op
# when the archive for the current source exists (docs/install.md).
image:
	tools/image/build.sh

# The in-container limiter, native/build/libgpupool.so (C, warnings as errors; see native/README.md).
# tests/native also builds the fake CUDA driver and test programs (make -C native test-bins).
native:
	$(MAKE) -C native all test-bins

# promtool and prometheus (Debian's package, apt-get as root) for the alert-rule and dashboard
# tests and the metrics e2e (deploy/prometheus, deploy/grafana); a no-op when installed.
prometheus:
	tools/prometheus/install.sh

# Debian's chromium (apt-get, as root) for the web view's headless browser test
# (tests/e2e/test_web_browser_e2e.py); a no-op when installed; elsewhere that test skips.
chromium:
	tools/chromium/install.sh || [ "$$(id -u)" != 0 ]

# The real node's host packages (runc, CNI plugins, iptables; apt-get, as root), containerd v2
# built from its Go module into ~/.cache/gpupool/containerd/<version>/bin (CDI on), and its
# images (pause, GPU probe) for `gpupool dev-cluster up --real-node` and its e2e tests; see
# docs/real-node.md. Installs nothing when all is there; on a host that cannot run a real node it
# says why and the real-node tests skip with that reason.
realnode: native
	tools/realnode/setup.sh || [ "$$(id -u)" != 0 ]

clean:
	rm -rf $(VENV) build native/build .mypy_cache .ruff_cache .pytest_cache
