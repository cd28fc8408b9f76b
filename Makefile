# `make venv` builds .venv; then `make demo` (the whole DAG locally) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_INSTALL := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -c constraints.txt
TCMALLOC := $(VENV)/lib/libtcmalloc_minimal.so.4

.PHONY: venv demo test test-fast lint bench compile components release-files images docs docs-serve docs-vendor clean tcmalloc
.PHONY: real-parts real-parts-runners real-parts-s3
.PHONY: cluster-deps cluster-parts cluster-up cluster-down test-cluster

# uv installs the pinned packages (pip resolves them to the same pins): it links them from its
# cache into the environment, where pip fetched and unpacked every wheel again (seconds against
# minutes: docs/how-to/one-node-cluster.md, "In CI"); pip stays there for whoever uses it.
# --compile-bytecode: pip writes every module's .pyc at install, uv by default does not; where
# PYTHONDONTWRITEBYTECODE is set (CI's shell sets it) no process writes them either, and every
# TensorFlow import compiled its thousands of modules again (17 CPU-s against 8: make test 34 min)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt uv
	$(UV_INSTALL) -e ".[dev]"
	-@$(MAKE) --no-print-directory tcmalloc
	touch $(STAMP)

# tcmalloc for tf.data (src/tfrecord_suite/train/allocator.py says why): the distribution's
# package unpacked into the virtual environment, no root needed; skipped where apt is missing
tcmalloc:
	@test -e $(TCMALLOC) || { command -v apt-get >/dev/null && dir=$$(mktemp -d) \
	  && (cd $$dir && { apt-get download -qq libtcmalloc-minimal4 \
	       || apt-get download -qq libtcmalloc-minimal4t64; } && dpkg -x libtcmalloc-minimal4*.deb root) \
	  && cp -L "$$(find $$dir/root -name libtcmalloc_minimal.so.4 | head -n 1)" $(TCMALLOC) \
	  && rm -rf $$dir; } || echo "tcmalloc not installed: tf.data will run with glibc malloc"

# the virtual environment alone (what every target below builds first)
venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/tfrecord-suite demo --workdir demo-bucket

# three workers (pytest-xdist) on CI's two cores: many tests wait on a subprocess, a server or
# podman, and a third worker fills those waits (docs/how-to/one-node-cluster.md, "In CI", has the
# times side by side); the tests that share podman, the control plane or Beam's job servers keep
# to one worker each (tests/conftest.py XDIST_GROUPS); PYTEST_WORKERS=0 runs them in this one
# process
PYTEST_WORKERS ?= 3
# tfrecord_suite.shard.warm caches the shard step's compiled loops beside their modules before
# the workers start: in a fresh clone each test process would otherwise compile those it calls
# until one of them has cached them
test: $(STAMP) real-parts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tfrecord_suite.shard.warm
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-fast: $(STAMP) real-parts-s3
	$(BIN)/python -m pytest -m "not slow and not e2e" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP) real-parts-s3
	$(UV_INSTALL) -e ".[bench]"
	LD_PRELOAD="$$(test -e $(TCMALLOC) && realpath $(TCMALLOC))" $(BIN)/python -m benchmarks \
	  --report docs/bench --readme docs/performance.md $(BENCH_ARGS)

images: $(STAMP)
	$(BIN)/tfrecord-suite images build $(IMAGES_ARGS)

compile: $(STAMP)
	for p in retraining data training; do \
	  $(BIN)/tfrecord-suite compile --pipeline $$p --output pipelines/$$p.yaml || exit 1; done

# each component's compiled spec and README (components/<category>/<name>/), from the component functions
# and their metadata.yaml; a test fails when a committed one is stale
components: $(STAMP)
	$(BIN)/tfrecord-suite components

# the documentation site (mkdocs.yml): built strict into site/, or served with live reload
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
docs: $(STAMP)
	$(DOCS_ENV) $(BIN)/mkdocs build --strict --site-dir site

# Mermaid for the site's diagrams (mkdocs.yml extra_javascript), from its npm release: the file
# is committed; this fetches it again and checks it against the pinned digest
MERMAID_VERSION := 11.17.2
MERMAID_SHA256 := 581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8
docs-vendor:
	dir=$$(mktemp -d) && (cd $$dir && npm pack --silent mermaid@$(MERMAID_VERSION) >/dev/null \
	  && tar xzf mermaid-$(MERMAID_VERSION).tgz package/dist/mermaid.min.js package/LICENSE) \
	  && echo "$(MERMAID_SHA256)  $$dir/package/dist/mermaid.min.js" | sha256sum -c --quiet \
	  && cp $$dir/package/dist/mermaid.min.js docs/assets/vendor/mermaid-$(MERMAID_VERSION).min.js \
	  && cp $$dir/package/LICENSE docs/assets/vendor/mermaid-$(MERMAID_VERSION).LICENSE \
	  && rm -rf $$dir

docs-serve: $(STAMP)
	$(DOCS_ENV) $(BIN)/mkdocs serve

# The real parts the tests run, built once from their published sources into a cache outside the
# repository (~/.cache/tfrecord-suite/realparts) at the versions tests/realparts/versions.env pins:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (the `k8s` tests), the
# job APIs' CRDs, SeaweedFS (the `s3` tests) and Beam's runners (the `runners` tests). Needs go,
# java and mvn; minutes the first time, nothing after.
real-parts:
	bash tests/realparts/build.sh all

# Beam's runners the `runners` tests shard on (Prism from Beam's Go module, the Flink and Spark job
# servers from Maven Central), built once into a cache outside the repository at the versions
# tests/realparts/versions.env pins; `tests/realparts/build.sh all` builds them too
real-parts-runners:
	bash tests/realparts/build.sh runners

# SeaweedFS, the S3 server the `s3` tests and the bench's network part start (built from its Go
# module into the same cache; `tests/realparts/build.sh all` builds it too)
real-parts-s3:
	bash tests/realparts/build.sh seaweedfs >/dev/null

# what a release attaches: every ready pipeline and component compiled for the images the
# release pushed (.github/workflows/release.yml: IMAGE_REGISTRY, IMAGE_TAG)
IMAGE_REGISTRY ?= ghcr.io/tfrecord-suite
IMAGE_TAG ?= $(shell $(BIN)/python -c 'import tfrecord_suite; print(tfrecord_suite.__version__)')
RELEASE_DIR ?= release
release-files: $(STAMP)
	$(BIN)/tfrecord-suite release-files --output $(RELEASE_DIR) \
	  --image-registry $(IMAGE_REGISTRY) --image-tag $(IMAGE_TAG)

# A one-node Kubernetes cluster on this machine (tests/cluster/node.py; root and Debian): the
# control plane, containerd and the kubelet, pod and service networks on a bridge of its own,
# CoreDNS, a NetworkPolicy engine, JobSet and the Kubeflow Trainer, and Kubeflow Pipelines 2.17.0
# (its backend and UI from the release's source archive, Argo Workflows under it), all built
# from the sources pinned in tests/realparts/versions.env into ~/.cache/tfrecord-suite/realparts.
# `make cluster-down` stops it and removes everything it made; `make test-cluster` runs the
# `cluster` tests (bringing a cluster up for the session where none runs; the `kfp` and `ui`
# tests among them) on two workers that share it (tests/support.py CLUSTER_GROUPS says why).
# docs/how-to/one-node-cluster.md says what they prove and how long they take.
CLUSTER_PYTHON := PYTHONPATH=$(CURDIR)/src:$(CURDIR)/tests $(BIN)/python
# chromium: the browser tests/integration/test_kfp_ui.py drives the Kubeflow UI with; awscli:
# the upload tests/integration/test_kubeflow_walk.py types as docs/deploy.md says
CLUSTER_DEBS := nftables libseccomp-dev podman runc debootstrap gcc libc6-dev busybox-static \
  chromium awscli
cluster-deps:
	@missing=$$(for p in $(CLUSTER_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then echo "installing $$missing from Debian"; \
	    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q $$missing >/dev/null; fi

cluster-parts: cluster-deps
	bash tests/realparts/build.sh node kfp >/dev/null

cluster-up: $(STAMP) cluster-parts
	$(CLUSTER_PYTHON) -m cluster up $(CLUSTER_ARGS)

cluster-down: $(STAMP)
	$(CLUSTER_PYTHON) -m cluster down

test-cluster: $(STAMP) cluster-parts
	TFRS_CLUSTER=1 $(CLUSTER_PYTHON) -m pytest -m cluster -n 2 --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) local_outputs demo-bucket bench-results site
