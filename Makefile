# The two set-up commands of the README: `make bench` (the main job) and `make test`.
# Each one creates or reuses .venv and installs what it needs from this project's own files.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)

.PHONY: venv bench test lint policy-test live-stack clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,live]'
	# The embedded OPA engine declares Python >= 3.14 but works on 3.11: a separate step.
	$(BIN)/python -m pip install -q --ignore-requires-python opa-golib-python-bindings==0.4.4
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

bench: $(STAMP)
	$(BIN)/guardrail bench $(ARGS)

test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/guardrail policy test
	$(BIN)/python -m pytest $(PYTEST_ARGS)

policy-test: $(STAMP)
	$(BIN)/guardrail policy test

# The live stack of real servers (docs/live.md): installs the Debian servers if missing (as root), starts all three
# substrates on loopback and prints their addresses and shell env; Ctrl-C stops everything.
live-stack: $(STAMP)
	./.ci/install-servers
	$(BIN)/python -m arena.live.stack saleor frappe slack

clean:
	rm -rf $(VENV) out
