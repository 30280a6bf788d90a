# Two commands do all the set-up on a fresh machine:
#   make repro   install, then the code fingerprints (make deps), then the embedded BioKG pipeline (dvc repro)
#   make test    install, then run the fast offline tests (unit and contract; make test-e2e: the end-to-end ones)
# and one says which stages are stale by their own inputs, and why (what depends on them reruns too):
#   make status  the stale stages grouped by cause (code, params/config, data, outputs only) and the count up to date
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
# where pip finds the CPU build of torch the lock pins (a flat page of wheels, or a local directory)
TORCH_WHEELS ?= https://download.pytorch.org/whl/torch/
UV ?= uv
# the lock: requirements/cpu.txt (this machine kind: Linux x86_64, CPython 3.11, CPU torch) and
# requirements/gpu.txt (CUDA torch from PyPI), both resolved from pyproject.toml's ranges and constraints.txt
LOCK_ARGS := --custom-compile-command 'make lock' pyproject.toml --extra dev --python-version 3.11 --python-platform x86_64-manylinux_2_28 --generate-hashes

.PHONY: install lock repro status check pull deps browser test test-e2e test-all bench

$(BIN)/.installed: requirements/cpu.txt requirements/no-deps.txt pyproject.toml
	rm -rf $(VENV)  # from scratch: a package the lock dropped must not linger
	python3 -m venv $(VENV)
	# torch first, alone: the only package from TORCH_WHEELS (a page pip would otherwise ask for every package)
	awk '/^torch==/{p=1; print; next} p && /^ +--hash/{print; next} {p=0}' requirements/cpu.txt > $(VENV)/torch.txt
	$(BIN)/pip install --quiet --no-deps --require-hashes --find-links $(TORCH_WHEELS) -r $(VENV)/torch.txt
	$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements/cpu.txt
	$(BIN)/pip install --quiet --no-deps --require-hashes -r requirements/no-deps.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

install: $(BIN)/.installed

# refresh the lock after editing pyproject.toml or constraints.txt (needs uv: pip install uv)
lock:
	$(UV) pip compile $(LOCK_ARGS) -c constraints.txt --find-links $(TORCH_WHEELS) --no-emit-find-links -o requirements/cpu.txt
	sed 's/^torch==\(.*\)+cpu$$/torch==\1/' constraints.txt > requirements/.constraints-gpu.txt
	$(UV) pip compile $(LOCK_ARGS) -c requirements/.constraints-gpu.txt -o requirements/gpu.txt
	rm requirements/.constraints-gpu.txt

# one W&B group for every stage of this repro (ark.tracking.run_group); a group set beforehand is kept. The output is
# also written to logs/repro/<group>.log, every line stamped: `python benchmarks/stage_times.py <log>` gives the
# per-stage times. DVC's closing hint to `dvc push` is dropped when no DVC remote is configured
repro: deps
	set -o pipefail; group="$${ARK_WANDB_GROUP:-repro-$$(date +%Y%m%d-%H%M%S)}"; mkdir -p logs/repro; \
	ARK_WANDB_GROUP="$$group" PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro 2>&1 \
	  | $(BIN)/python -uc 'import sys, time; [print(time.strftime("%H:%M:%S"), l, end="", flush=True) for l in sys.stdin if not (l.startswith("Use `dvc push`") and not sys.argv[1])]' "$$($(BIN)/dvc remote list)" \
	  | tee "logs/repro/$$group.log"

# the stale stages of dvc.yaml grouped by their most upstream cause, and how many are up to date (ark status: a
# summary of dvc status; exit 1 when a stage is stale). While a dvc repro runs it fails, naming the stage that repro
# holds (dvc status cannot read that stage's files meanwhile)
status: install
	$(BIN)/ark status

# after `make repro`: every BioKG table cell this clone regenerated against results/expected.json, each within its
# tolerance (exact where the computation is the same on any CPU); OK only when every cell was regenerated here and holds
check: install
	$(BIN)/python -m ark.report.check

# every stage's outputs from the DVC remote you configured (docs/pipeline.md: "Sharing results")
pull: install
	@if [ -z "$$($(BIN)/dvc remote list)" ]; then \
	  echo "make pull: no DVC remote is configured; add one with 'dvc remote add -d <name> <url>' (docs/pipeline.md, Sharing results), or rebuild with make repro" >&2; exit 2; fi
	$(BIN)/dvc pull

# the generated deps of both pipelines (ark.stage_deps): code.yaml, the fingerprint of the code each entry runs (the
# syntax of the definitions it reaches, without comments or docstrings), and deps.yaml, the config files it composes.
# make repro runs it first; CHECK=1 changes nothing and fails if a generated file is stale (CI)
deps: install
	$(BIN)/python -m ark.stage_deps $(if $(CHECK),--check)

# Debian's chromium for the run-page tests (tests/test_page.py renders pages headless; skipped without it): a setup
# step, never run inside a test. Needs root and apt-get; elsewhere, install chromium yourself
browser:
	@command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null

# the tests in TEST_WORKERS processes (pytest-xdist; 1: in this process), a file's tests in one of them (its
# module fixtures built once): test = unit and contract tests (fast);
# test-e2e = the end-to-end ones (a README walkthrough, dvc repro in copies, sweeps, fault injection); CI runs both
TEST_WORKERS ?= 2
# compiled modules are cached (__pycache__, git-ignored) even where the environment sets PYTHONDONTWRITEBYTECODE:
# else each worker and each subprocess compiles src/ and rewrites the tests' asserts again (~6 CPU-s a process)
test test-e2e test-all: export PYTHONDONTWRITEBYTECODE :=
test: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

test-e2e: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m e2e

test-all: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "slow or not slow"

bench: install
	$(BIN)/python benchmarks/tools_latency.py
