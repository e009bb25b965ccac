# trainimg: the two commands first. `make demo` sets up this machine and runs the main job end to end:
# local base -> build the CPU PyTorch variant -> conformance with 4 replicas -> push to a local registry.
SHELL := /bin/bash
PYTHON ?= python3
export TRAINIMG_DOCKER_CLI ?= /usr/bin/docker
BASE ?= local/debian:bookworm
# The demo's variant: the CPU PyTorch variant on BASE's Debian release (`trainimg list`: name, tag, arches, base), read
# from the recipes when the demo runs (after `install`), so a bump of the recipes changes no line here.
VARIANT ?= $(shell trainimg list | awk '$$1 ~ /^pytorch-.*-cpu-/ && $$4 == "debian:$(lastword $(subst :, ,$(BASE)))-slim" \
  { print $$1; exit }')
REGISTRY ?= localhost:5000
# What the demo release audits every pin against: unset, release's default (OSV's public API, which needs the
# internet); ADVISORIES=DIR|URL, a folder of OSV records or an OSV-compatible service; SKIP_AUDIT=1, no audit
# (--skip-audit, recorded in the report, the release record and the SBOM).
ADVISORIES ?=
SKIP_AUDIT ?=
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: demo test test-quick lint setup setup-bench setup-demo install install-demo render check registry-start registry-stop clean bench stress \
  docs docs-build docs-reference

demo: setup-demo install-demo
	@test -n "$(VARIANT)" || { echo "demo: no CPU PyTorch variant on $(BASE)'s Debian in recipes/"; exit 2; }
	trainimg validate
	trainimg render --check
	trainimg registry start --login
	@audit="$(if $(ADVISORIES),--advisories $(ADVISORIES))$(if $(SKIP_AUDIT), --skip-audit)"; \
	osv=$$($(PYTHON) -c 'from trainimg.options import OSV_API; print(OSV_API)'); \
	if [ -z "$$audit" ] && ! curl -s -o /dev/null --max-time 10 "$$osv"; then \
	  echo "demo: OSV's public API ($$osv) does not answer from this machine: this release goes without the audit" \
	    "(--skip-audit, recorded in its reports); ADVISORIES=DIR|URL audits against your own copy"; \
	  audit=--skip-audit; \
	fi; \
	set -x; trainimg release $(VARIANT) --base-image $(BASE) \
	  --platform vertex --replicas 4 --registry $(REGISTRY) --json reports/demo.json --junit reports/demo.xml $$audit
	@echo "demo: $(VARIANT) built, passed conformance on 4 replicas and was pushed to $(REGISTRY)"

# All four tiers (tests/conftest.py derives each test's tier from the fixtures it uses), on one pytest-xdist worker
# per CPU: the engine tests (tiers 3 and 4) in two lanes, each one at a time on one worker (the tests that only run
# containers from the suite's images, and the rest); tiers 1 and 2 beside them. PYTEST_WORKERS=0 runs everything
# in this process.
PYTEST_WORKERS ?= auto
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadgroup)
# The tutorials' steps start `trainimg registry start` on localhost:5000, as their reader does: a local registry left
# running there (by `make demo`) is stopped first, its images and password kept (`make registry-start` serves them).
test: setup install
	@if trainimg registry status 2>/dev/null | grep -q ': running'; then \
	  echo "test: stopping the local registry on localhost:5000 (the tutorials start their own there; its data is" \
	    "kept: make registry-start serves it again)"; \
	  trainimg registry stop > /dev/null; \
	fi
	$(PYTHON) -m pytest -q $(XDIST) $(PYTEST_ARGS)

# Tiers 1 and 2: in-process tests and host tools (framework venvs, Slurm, Chromium, ...), no engine. DOCKER_HOST
# points nowhere, so a test that reaches the engine without requesting its fixture fails here instead of passing.
test-quick: setup install
	DOCKER_HOST=unix:///nonexistent/trainimg-test-quick.sock $(PYTHON) -m pytest -q $(XDIST) -m "tier1 or tier2" \
	  $(PYTEST_ARGS)

# The gates (issue 13): types, pyflakes, import layers, sizes (of builder/ and benchmarks/). Every check runs; each
# violation is one `file:line: message` line; the exit status is non-zero if any check found one.
lint: install
	@rc=0; \
	$(PYTHON) -m mypy builder || rc=1; \
	$(PYTHON) -m mypy docs/gen || rc=1; \
	$(PYTHON) -m ruff check --quiet --output-format concise builder tests benchmarks .ci docs/gen || rc=1; \
	$(PYTHON) .ci/lint_layers.py || rc=1; \
	$(PYTHON) .ci/lint_sizes.py || rc=1; \
	$(PYTHON) .ci/lint_sizes.py benchmarks || rc=1; \
	$(PYTHON) .ci/lint_sizes.py docs/gen || rc=1; \
	if [ $$rc -eq 0 ]; then echo "lint: clean"; else echo "lint: violations above"; fi; \
	exit $$rc

bench: setup-bench install
	$(PYTHON) benchmarks/bench.py $(BENCH_ARGS)

# Not in CI: 60 concurrent `trainimg test` runs of a good image; false failures and leftovers must both be 0.
stress: setup install
	$(PYTHON) benchmarks/stress.py

setup:
	bash .ci/setup-host

# Everything the tests use, and trixie's arm64 base (benchmarks/arm64.py builds the shipped JAX CPU variant on it).
setup-bench:
	bash .ci/setup-host --bench

# The demo's part of it (the engine, debootstrap and the bookworm base, the registry): no test tool.
setup-demo:
	bash .ci/setup-host --demo

# pip runs only when another checkout is the one installed, or pyproject.toml changed since this one was (the
# stamp): `.ci/run`, `make lint` and `make test` each ask, and it installs once (15 s a time here).
install:
	@$(PYTHON) -c 'import importlib.util as u, sys; s = u.find_spec("trainimg"); \
	  sys.exit(not (s and s.origin and s.origin.startswith("$(CURDIR)/")))' 2>/dev/null \
	  && [ .install.stamp -nt pyproject.toml ] \
	  || { $(PYTHON) -m pip install -q -e '.[test]' && touch .install.stamp .install-demo.stamp; }

# The demo's install: trainimg alone, without the test and docs extras (the real clients, mkdocs, mypy, ...).
install-demo:
	@$(PYTHON) -c 'import importlib.util as u, sys; s = u.find_spec("trainimg"); \
	  sys.exit(not (s and s.origin and s.origin.startswith("$(CURDIR)/")))' 2>/dev/null \
	  && [ .install-demo.stamp -nt pyproject.toml ] \
	  || { $(PYTHON) -m pip install -q -e . && touch .install-demo.stamp; }

# The documentation site (mkdocs.yml, docs/): `make docs` serves it on localhost:8000 and rebuilds on each edit;
# `make docs-build` writes it to site/ (strict: a broken link, anchor or page missing from the nav fails);
# `make docs-reference` writes the generated pages (docs/reference/, docs/project/benchmarks.md) from the code.
MKDOCS = NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(PYTHON) -m mkdocs
docs: install
	$(MKDOCS) serve

docs-build: install
	$(MKDOCS) build --strict --site-dir site

docs-reference: install
	$(PYTHON) docs/gen/reference.py

render: install
	trainimg render

check: install
	trainimg validate
	trainimg render --check

registry-start: install
	trainimg registry start --login

registry-stop: install
	trainimg registry stop

clean:
	-docker ps -aq --filter label=trainimg.run | xargs -r docker rm -f
	-docker network ls -q --filter label=trainimg.run | xargs -r docker network rm
