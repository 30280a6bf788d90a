# Two commands do all the set-up on a fresh machine:
#   make repro   install, then run the embedded BioKG pipeline (dvc repro)
#   make test    install, then run the fast offline tests
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install repro test test-all bench

$(BIN)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

install: $(BIN)/.installed

repro: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

test: install
	$(BIN)/pytest -q

test-all: install
	$(BIN)/pytest -q -m "not gpu"

bench: install
	$(BIN)/python benchmarks/tools_latency.py
