# The two commands that do all set-up on a fresh machine:
#   make demo   the main job: the op on this device (cpu without a GPU) against the fp32 reference
#   make test   the test suite (runs on a CPU-only machine)
# and CI's sanitizer job (.ci/sanitize): make sanitize
# Both create .venv (seeing the system's packages, so a preinstalled torch build is used),
# install torch $(TORCH) only when no torch is importable, and install this package editable.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python

.PHONY: demo test sanitize setup

demo: $(VENV)/.ready
	$(PY) -m mxlogits demo

test: $(VENV)/.ready
	$(PY) -m pytest -q

sanitize: $(VENV)/.ready
	bash .ci/sanitize

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@
