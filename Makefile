# polyvox: `make serve` starts the main job, `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# NOTE: torch is pinned to the CPU build that installs from local disk on our machines;
# any other version pulls a multi-GB CUDA build. The package itself accepts torch >= 2.5.
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install serve test clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet $(TORCH) -e '.[piper,test]'
	touch $(STAMP)

serve: install
	$(BIN)/polyvox serve

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis out.wav
