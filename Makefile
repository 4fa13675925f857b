# Every target creates or refreshes .venv itself, so a fresh clone needs only
# `make run` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CLIENT := clients/python
# What running needs (the hub and the client SDK it depends on), then the
# test, lint and benchmark tools on top: `make run` installs only the first.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
ARGS   ?=

.PHONY: run test bench fuzz fuzz-http soak lint venv clean

venv: $(DEV_STAMP)

# The client SDK is its own distribution (agora-hub-client), on no index: it
# is installed from the checkout with the hub, which depends on it.
$(RUN_STAMP): pyproject.toml $(CLIENT)/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./$(CLIENT) -e .
	touch $@

$(DEV_STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install --quiet -e './$(CLIENT)[api]' -e '.[dev]'
	touch $@

run: $(RUN_STAMP)
	$(BIN)/agora-hub serve $(ARGS)

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q $(ARGS)

bench: $(DEV_STAMP)
	$(BIN)/python -m tests.benchmarks $(ARGS)

# Hundreds of thousands of hostile frames against a hub process (ARGS="--frames N --seed S").
fuzz: $(DEV_STAMP)
	$(BIN)/python -m tests.fuzz $(ARGS)

# Tens of thousands of hostile HTTP requests against a hub's HTTP port
# (ARGS="--requests N --seed S"): any 5xx, echoed secret, hang, crash or traceback fails.
fuzz-http: $(DEV_STAMP)
	$(BIN)/python -m tests.fuzz_http $(ARGS)

# A cluster under churn, a node killed, Redis restarted: did anything get lost?
# Five minutes by default (ARGS="--duration 1800" for longer). Not part of `make test`.
soak: $(DEV_STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check hub protocol adapters $(CLIENT) tests
	$(BIN)/ruff format --check hub protocol adapters $(CLIENT) tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
