# Every target creates or refreshes .venv itself, so a fresh clone needs only
# `make run` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: run test bench fuzz fuzz-http soak lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/agora-hub serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks $(ARGS)

# Hundreds of thousands of hostile frames against a hub process (ARGS="--frames N --seed S").
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz $(ARGS)

# Tens of thousands of hostile HTTP requests against a hub's HTTP port
# (ARGS="--requests N --seed S"): any 5xx, echoed secret, hang, crash or traceback fails.
fuzz-http: $(STAMP)
	$(BIN)/python -m tests.fuzz_http $(ARGS)

# A cluster under churn, a node killed, Redis restarted: did anything get lost?
# Five minutes by default (ARGS="--duration 1800" for longer). Not part of `make test`.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check hub protocol adapters tests
	$(BIN)/ruff format --check hub protocol adapters tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
