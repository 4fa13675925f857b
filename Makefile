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
# setuptools says once per editable install that a folder named like a package
# may shadow it: true of every editable install, and 20 lines of a newcomer's
# first screen. Only that notice is silenced.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet

JS     := clients/js

.PHONY: run test test-js bench fuzz fuzz-http soak conformance lint lint-js venv clean

venv: $(DEV_STAMP)

# The client SDK is its own distribution (agora-hub-client), on no index: it
# is installed from the checkout with the hub, which depends on it.
$(RUN_STAMP): pyproject.toml $(CLIENT)/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(PIP_INSTALL) -e ./$(CLIENT) -e .
	touch $@

$(DEV_STAMP): $(RUN_STAMP)
	$(PIP_INSTALL) -e './$(CLIENT)[api]' -e '.[dev]'
	touch $@

run: $(RUN_STAMP)
	$(BIN)/agora-hub serve $(ARGS)

test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q $(ARGS)
	$(MAKE) --no-print-directory test-js

# Node >= 20 with npm, or: outside CI a skip with a note, under CI=true a failure
# (nothing may be skipped there; .ci/run installs Node).
NODE_CHECK = if ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' 2>/dev/null \
	|| ! command -v npm >/dev/null 2>&1; then \
	case "$${CI:-}" in 1|true|TRUE|True|yes) \
	echo "Node >= 20 with npm is needed for the JavaScript client (.ci/run installs it)" >&2; exit 1;; esac; \
	echo "skipping the JavaScript client: Node >= 20 with npm is not installed" >&2; exit 0; fi
# npm ci when node_modules is missing or older than the lock file (it builds dist/ too).
JS_DEPS = cd $(JS) && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }

# The JavaScript client's node --test suites, against real hub processes (.venv's).
test-js: $(RUN_STAMP)
	@$(NODE_CHECK); $(JS_DEPS) && npm test

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

# The official MCP conformance suite (npm @modelcontextprotocol/conformance, pinned in
# tests/conformance/package-lock.json, on a Node 22 from npm) against a hub process on
# its default settings with an agent offering the suite's tools; every server scenario,
# failing on any applicable failure (tests/conformance/run.py). Needs npm (any Node).
# Not part of `make test`: CI runs it (tests/integration/test_mcp_conformance.py).
conformance: $(DEV_STAMP)
	$(BIN)/python -m tests.conformance $(ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check hub protocol adapters $(CLIENT) tests
	$(BIN)/ruff format --check hub protocol adapters $(CLIENT) tests
	$(MAKE) --no-print-directory lint-js

# tsc --noEmit over the JavaScript client's source and the examples.
lint-js:
	@$(NODE_CHECK); $(JS_DEPS) && npm run --silent typecheck

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache $(JS)/node_modules $(JS)/dist
