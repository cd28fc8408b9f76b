# Two entry points: `make demo` (the whole DAG locally) and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench compile images clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tfrecord-suite demo --workdir demo-bucket

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not e2e" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/tfrecord-suite -v bench $(BENCH_ARGS)

images: $(STAMP)
	$(BIN)/tfrecord-suite images build $(IMAGES_ARGS)

compile: $(STAMP)
	$(BIN)/tfrecord-suite compile --output pipelines/tfrecord_suite_pipeline.yaml

clean:
	rm -rf $(VENV) local_outputs demo-bucket bench-results
