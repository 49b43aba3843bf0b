# The two commands of the README:
#   make book   set up .venv (pinned, CPU build of PyTorch) and build the site into _build/html
#   make test   unit tests, every chapter executed by nbval, strict book build, browser check
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
# Where a CPU-only build of torch comes from when no local wheel is available.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP       := $(VENV)/.convres-installed

.PHONY: book test unit notebooks strict-build venv clean help
.DEFAULT_GOAL := help

help:
	@echo "make book   build the book into _build/html (creates $(VENV) on first use)"
	@echo "make test   run every test: unit tests, notebooks (nbval), strict book build"

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "convres needs Python >= 3.11; set PYTHON=python3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	# torch: the CPU build, from a local wheel when there is one, else from the CPU index
	$(BIN)/pip install --no-index --no-deps torch==2.13.0 2>/dev/null \
	  || $(BIN)/pip install --no-deps torch==2.13.0 --index-url $(TORCH_INDEX)
	$(BIN)/pip install torch==2.13.0 -r requirements.txt
	$(BIN)/pip install --no-deps -e .
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build book

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=300 book

strict-build: $(STAMP)
	$(BIN)/jupyter-book build book -W -n --keep-going

test: unit notebooks strict-build

clean:
	rm -rf _build
