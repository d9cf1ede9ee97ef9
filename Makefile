# Quick start:  make investigate   (sets up .venv, runs the dsv4-flash investigation on this machine)
#               make test          (sets up .venv, runs the whole test suite)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TARGET ?= dsv4-flash
DECIDE ?= auto

.PHONY: setup investigate test
setup: $(VENV)/.installed

# torch is pinned to the CPU build that lies on this kind of machine (an unpinned torch pulls a
# multi-GB CUDA build); sglang comes without its dependencies: only its source is needed here.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[box,test]'
	$(PY) -m pip install -q --no-deps sglang==0.5.23
	touch $@

investigate: setup
	$(PY) -m agent investigate $(TARGET) --decide $(DECIDE)

test: setup
	$(PY) -m pytest -q
