PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
LOCAL_STAMP := $(VENV)/.installed-local
INFRA_STAMP := $(VENV)/.installed-infra

.PHONY: install test test-fast lint format demo clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# vllm-omni's wheel is pure Python; only its request model is used (tests/unit/worker/
# test_vllm_contract.py loads it by file path), so it goes in without its GPU dependencies.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet --no-deps 'vllm-omni==0.30.*'
	touch $(STAMP) $(LOCAL_STAMP)

# What a deploy needs and no more: the package with the Pulumi SDKs, in the .venv that
# Pulumi.yaml names (`pulumi up` runs __main__.py there), so `tts-fleet deploy` works too.
install: $(INFRA_STAMP)

$(INFRA_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[infra]'
	touch $(INFRA_STAMP)

$(LOCAL_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[local]'
	touch $(LOCAL_STAMP)

# Layering (import-linter contracts in pyproject.toml) and types (mypy over tts_fleet/,
# components/ and worker/) run before the tests; lint-imports reads components/ from this
# directory. Four pytest-xdist workers, each taking whole modules (`--dist loadfile`) so a
# module's fixtures are built once; `-n` stays out of addopts so one test still runs serially.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n 4 --dist loadfile

# The tiers that start no process (docs/testing.md): tests/unit and tests/integration.
test-fast: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile tests/unit tests/integration

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The speech stand-in makes 15 % of the pieces run away, stop early or pause for seconds (issue
# 21); the workers' checks (worker.qa.mode basic, the default) catch and re-render every one, as
# the summary shows. Fault seed 15 gives each of the three kinds in these 40 jobs.
DEMO_FAULTS = runaway=0.05,truncate=0.05,silence=0.05
demo: $(LOCAL_STAMP)
	$(BIN)/tts-fleet local --demo 40 --max-workers 4 --cold-start-ticks 2 \
		--speech-latency-ms 1000 --faults $(DEMO_FAULTS) --fault-seed 15

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache
