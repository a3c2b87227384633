# The only entry point: CI (.ci/run) calls lint, proto-check, floors, test and test-runsc. `make help` lists targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ENGINE_STAMP := .engine-ok

.PHONY: help venv proto proto-check typescript-proto typescript-proto-check typescript-bench lint-typescript test-typescript floors engine helper go agent test-agent fuzz-agent agent-proto-check wheel image daemon-image run test test-static-agent test-runsc test-gvisor test-fast fuzz chaos lint bench clean

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_.-]+:([^=].*)?## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(STAMP) ## .venv with the toolrt script and dev tools

proto: $(STAMP) ## regenerate runtime/_proto from proto/
	$(PY) scripts/gen_proto.py

proto-check: proto ## fail if the committed stubs differ from proto/
	git diff --exit-code -- runtime/_proto
	@new=$$(git ls-files --others --exclude-standard -- runtime/_proto); \
	if [ -n "$$new" ]; then echo "generated but not committed: $$new"; exit 1; fi

floors: ## install the runtime dependencies at their declared floors in a scratch venv, import the daemon
	$(PYTHON) scripts/check_floors.py

engine: ## make sure a Docker engine answers (installs docker.io as root when missing)
	@docker info >/dev/null 2>&1 || bash scripts/ensure-docker.sh

HELPER := runtime/agent/toolrt-spawn

# The launcher every command starts through, in C, static so it runs in any
# image: built the way a daemon builds it at start-up (agent_dir.py: musl-gcc
# where musl-tools is installed, 25 KB and about 0.17 ms less CPU a call than
# glibc's static 750 KB; gcc -static otherwise), with its stamp (the source's
# sha256), which tells the daemon it need not build it again.
$(HELPER): runtime/agent/spawn.c | $(STAMP)
	@[ "$$(id -u)" -ne 0 ] || bash scripts/ensure-agent-tools.sh
	$(PY) -m runtime.sandbox.agent_dir runtime/agent

helper: $(HELPER) ## build the agent's native spawn helper

# The static agent (static-agent/, Go, stdlib only): one binary with no libc
# dependency, so it runs in any Linux image of the host's architecture.
GO ?= go
AGENT := runtime/agent/toolrt-agent
AGENT_SOURCES := static-agent/go.mod $(shell find static-agent -name '*.go' -not -name '*_test.go' 2>/dev/null)
AGENT_FUZZTIME ?= 30s

go: ## make sure Debian's golang-go and busybox-static are installed (apt, as root, when missing)
	@bash scripts/ensure-agent-tools.sh

$(AGENT): $(AGENT_SOURCES)
	@bash scripts/ensure-agent-tools.sh
	cd static-agent && CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o ../$(AGENT) .
	@echo "built $(AGENT) ($$(stat -c %s $(AGENT)) bytes)"

agent: $(AGENT) $(HELPER) ## build the static agent (Go), the in-sandbox agent; it starts commands through the C helper

test-agent: go ## go vet and go test of the static agent (its codec against the golden frames)
	cd static-agent && CGO_ENABLED=0 $(GO) vet ./... && CGO_ENABLED=0 $(GO) test ./...

fuzz-agent: go ## fuzz the static agent's frame decoder, its tar extraction and its export-listing parser, AGENT_FUZZTIME (default 30s) each
	cd static-agent && CGO_ENABLED=0 $(GO) test ./protocol -run '^$$' -fuzz FuzzDecoder -fuzztime $(AGENT_FUZZTIME)
	cd static-agent && CGO_ENABLED=0 $(GO) test . -run '^$$' -fuzz FuzzExtract -fuzztime $(AGENT_FUZZTIME)
	cd static-agent && CGO_ENABLED=0 $(GO) test . -run '^$$' -fuzz FuzzExportListing -fuzztime $(AGENT_FUZZTIME)

# protocol.py is the one definition of the agent's messages: the Go types and
# the golden frames are generated from it and must be committed as generated.
agent-proto-check: $(STAMP) go ## fail if static-agent/protocol differs from what runtime/static-agent/protocol.py generates
	$(PY) scripts/gen_agent_protocol.py
	$(PY) scripts/gen_agent_golden.py
	$(PY) scripts/gen_agent_redact.py
	git diff --exit-code -- static-agent/protocol static-agent/testdata
	@new=$$(git ls-files --others --exclude-standard -- static-agent/protocol static-agent/testdata); \
	if [ -n "$$new" ]; then echo "generated but not committed: $$new"; exit 1; fi

# A wheel that carries the static agent and the helper beside the Python code,
# so hosts without Go or a C compiler can run sandboxes. Both binaries
# are linked statically (no libc, no shared library at all), so they run on any
# Linux of the host's architecture: the manylinux2014 tag (glibc >= 2.17, which
# they do not even need) is truthful, and py3-none says the Python code is pure. An
# sdist or a wheel built from a clean tree (`pip wheel .`) carries neither and
# stays py3-none-any. build/ goes first: setuptools would ship files it kept.
WHEEL_PLATFORM ?= manylinux2014_$(shell uname -m)

wheel: $(STAMP) agent ## the platform wheel (dist/toolrt-*-py3-none-manylinux2014_ARCH.whl), carrying the static agent and helper
	@test -x $(AGENT) && test -x $(HELPER) && test -f $(HELPER).sha256 || \
		{ echo "make wheel needs $(AGENT), $(HELPER) and its stamp (make agent; gcc)"; exit 1; }
	rm -rf build dist/toolrt-*.whl
	$(PY) -m pip wheel -q --no-deps -w dist \
		--config-settings=--build-option=--plat-name=$(WHEEL_PLATFORM) .
	@ls dist/toolrt-*-$(WHEEL_PLATFORM).whl

image: $(STAMP) engine $(HELPER) ## build the default sandbox image if its recipe changed
	$(VENV)/bin/toolrt image build

daemon-image: image agent ## the daemon's own container image (toolrt-daemon), offline: the sandbox image as base, a wheelhouse in dist/wheels (with the agent and launcher built here)
	rm -rf dist/wheels
	$(PY) -m pip wheel -q -w dist/wheels .
	docker build -q -f packaging/Dockerfile -t toolrt-daemon .

run: image agent ## start the daemon in the foreground on 127.0.0.1:50051
	$(VENV)/bin/toolrt serve $(ARGS)

# The Docker tests one at a time (they share the engine and measure stalls),
# then the rest on FAST_WORKERS workers as test-fast runs them; both run, and
# either failing fails the target. A half that PYTEST_ARGS leaves empty
# (pytest's exit 5, "no tests collected") is not a failure.
test: image agent ## the whole suite against the real Docker engine (the long chaos cases: make chaos; images without Python and the wheel: make test-static-agent)
	@rc=0; \
	$(PY) -m pytest -m "docker and not chaos and not static_agent" $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	$(PY) -m pytest -m "not docker and not chaos and not static_agent" -n $(FAST_WORKERS) $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

# The agent on images other than the default (BusyBox only, no python3, no
# /etc/passwd), fuzzed frames from inside, and the platform wheel installed
# outside the checkout serving sandboxes: their own target (the wheel build
# takes a minute); CI runs it after make test.
test-static-agent: image agent wheel ## the agent on a BusyBox-only image, fuzzed from inside, and served from the installed platform wheel
	$(PY) -m pytest -m "static_agent and not chaos" $(PYTEST_ARGS)

# The Docker suite again with every sandbox under gVisor (TOOLRT_TEST_RUNTIME=runsc;
# tests marked runc_only are skipped there, with their reason, and a few accept
# what DESIGN's platform note says differs). Not the packaging tests: their
# daemons (installed, or in the daemon image) run under the engine's default.
# About 13-19 minutes on two shared cores. Without runsc registered in the
# engine it says so loudly and passes: CI registers it (ensure-docker.sh).
test-runsc: image agent ## tests/docker with every sandbox under gVisor (runsc); CI runs it after make test
	@if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then \
		echo '!!!!!!!! test-runsc SKIPPED: runsc is not registered with this Docker engine !!!!!!!!'; \
		echo '!!!!!!!! (scripts/ensure-docker.sh as root installs and registers it)       !!!!!!!!'; \
		exit 0; \
	fi; \
	TOOLRT_TEST_RUNTIME=runsc $(PY) -m pytest tests/docker -m "not chaos" \
		--ignore tests/docker/test_install.py --ignore tests/docker/test_daemon_image.py \
		--ignore tests/docker/test_wheel_static_agent.py $(PYTEST_ARGS)

test-gvisor: test-runsc ## the same as test-runsc

# On as many workers as the host has cores (pytest-xdist): the fast tests
# spend most of their time starting in-process daemons, one core at a time.
FAST_WORKERS ?= $(shell nproc)

test-fast: $(STAMP) helper $(AGENT) ## every test not marked docker (tests/unit and a few beside Docker ones): no engine, on FAST_WORKERS workers
	$(PY) -m pytest -m "not docker" -n $(FAST_WORKERS) $(PYTEST_ARGS)

# The providers (runtime/integrations) driven by mini-swe-agent's and Deep Agents'
# own code against a daemon started for the run, in .venv-integrations (built
# from the extras at the versions of tests/integrations/constraints.txt).
.PHONY: test-integrations
test-integrations: image ## the harness providers through the harnesses' own loops and suites
	bash scripts/test_integrations.sh $(PYTEST_ARGS)

# `make test` runs the fuzz tests too, each with a small derandomized budget;
# this runs them with FUZZ_EXAMPLES random examples per target (not in CI).
FUZZ_EXAMPLES ?= 2000

fuzz: image ## fuzz every tool argument and RPC field: FUZZ_EXAMPLES (default 2000) per target
	TOOLRT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/docker -m fuzz --timeout=0 \
		--hypothesis-show-statistics $(PYTEST_ARGS)

# Daemons killed under load (kill -9 with a client retrying the same ids,
# SIGTERM keep and close, containers killed from outside, a crash during
# re-adoption). `make test` runs a few kill cycles; this runs CHAOS_CYCLES.
CHAOS_CYCLES ?= 20

chaos: image ## restart and crash tests against the real engine, CHAOS_CYCLES (default 20) kill -9 cycles
	TOOLRT_CHAOS_CYCLES=$(CHAOS_CYCLES) $(PY) -m pytest tests/docker/test_chaos.py tests/docker/test_restarts.py \
		--timeout=900 $(PYTEST_ARGS)

lint: $(STAMP) ## ruff, ruff format --check, mypy
	$(VENV)/bin/ruff check runtime tests scripts bench
	$(VENV)/bin/ruff format --check runtime tests scripts bench
	$(VENV)/bin/mypy

# Without npm (or if its build fails) the TypeScript client's row says why it is missing.
bench: image ## benchmark vs docker exec and llm-sandbox (BENCH_ARGS=--quick); writes bench/results
	bash bench/setup.sh
	-command -v npm >/dev/null && $(MAKE) --no-print-directory typescript-bench
	bench/.venv/bin/python -m bench.run $(BENCH_ARGS)
	$(PY) -m bench.restarts

TS := sdk/typescript
NPM := npm --prefix $(TS)

$(TS)/node_modules/.package-lock.json: $(TS)/package-lock.json
	$(NPM) ci --no-audit --no-fund

typescript-proto: $(TS)/node_modules/.package-lock.json ## regenerate sdk/typescript/src/gen from proto/ (buf, protoc-gen-es)
	cd $(TS) && npx buf generate ../../proto

typescript-proto-check: typescript-proto ## fail if the TypeScript SDK's generated messages differ from proto/
	git diff --exit-code -- $(TS)/src/gen
	@new=$$(git ls-files --others --exclude-standard -- $(TS)/src/gen); \
	if [ -n "$$new" ]; then echo "generated but not committed: $$new"; exit 1; fi

typescript-bench: $(TS)/node_modules/.package-lock.json ## build the TypeScript client's bench runner (sdk/typescript/build/bench)
	cd $(TS) && npx tsc -p tsconfig.json

lint-typescript: $(TS)/node_modules/.package-lock.json ## tsc --noEmit and eslint on the TypeScript SDK
	cd $(TS) && npx tsc --noEmit -p tsconfig.json && npx eslint .

# npm ci from the lockfile, then the SDK's tests (node --test) beside three real
# daemons on 127.0.0.1 that scripts/typescript_daemons.py starts and stops.
test-typescript: image ## the TypeScript SDK's tests against real daemons (Docker, default image)
	$(NPM) ci --no-audit --no-fund
	PYTHONPATH=. $(PY) scripts/typescript_daemons.py -- $(NPM) test

clean: ## remove the venv and caches (not images)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
