# The README's commands:
#   make book    set up .venv (the lock; torch's CPU build), fetch the data the book reads when the data
#                folder lacks it, and build the site into _build/html (each chapter executed once)
#   make test    make check, then the strict book build (it executes every chapter and fails on any
#                error: it is the notebook test) and the browser check of the built site
#   make check   the quick loop: ruff, mypy, the unit tests in parallel processes (pytest-xdist)
# Also: make lock (after editing requirements.in), make pdf, make data, make clean.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.convres-installed
LOCK        := requirements.lock
# torch's CPU build, a local wheel or the CPU index (the lock's PyPI hashes would be the CUDA build's).
TORCH       := torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
NPM         ?= $(abspath $(BIN))/npm
ASSETS      := web/node_modules/.convres-installed
JOBS        ?= 2
SITE_TESTS  := tests/test_site.py tests/test_links.py tests/test_lines.py
# jupyter-cache (_config.yml) keeps executed chapters; a change of package, book or results empties it.
EXEC_HASH   := _build/.executed-with
EXEC_INPUTS := $(shell find convres book results _config.yml -type f \( -name '*.py' -o -name '*.md' \
               -o -name '*.yml' -o -name '*.bib' -o -name '*.json' \) | LC_ALL=C sort)
SOURCES_SHA := $(shell cat $(EXEC_INPUTS) | sha256sum | cut -c1-16)

.PHONY: book test check lint unit data experiments executed strict-build browser pdf venv lock clean \
        help
.DEFAULT_GOAL := help

help:  # the comment at the top of this file
	@sed -n '2,7s/^# \{0,1\}//p' $(firstword $(MAKEFILE_LIST))

venv: $(STAMP)

$(STAMP): $(LOCK) pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else "convres needs Python 3.11 to 3.13; set PYTHON=python3.12, say")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --no-index --no-deps $(TORCH) 2>/dev/null || $(BIN)/pip install --no-deps $(TORCH) --index-url $(TORCH_INDEX)
	$(BIN)/pip install --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

# One lock for Linux and macOS, Python 3.11 to 3.13 (uv's universal resolution); pins kept where they fit.
lock:
	$(PYTHON) -m venv .venv-lock && .venv-lock/bin/pip install --quiet uv==0.13.9
	UV_PYTHON_DOWNLOADS=never .venv-lock/bin/uv pip compile --universal --python-version 3.11 --generate-hashes \
	  --custom-compile-command "make lock" --output-file $(LOCK) requirements.in

$(ASSETS): web/package.json web/package-lock.json $(STAMP)
	cd web && $(NPM) ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $(ASSETS)

# The data sets into $CONVRES_DATA_DIR (~/.cache/convres/data) when missing (HF_ENDPOINT, CONVRES_JENA_URL).
data: $(STAMP)
	$(BIN)/python -m convres data

executed:
	@mkdir -p _build
	@test "$$(cat $(EXEC_HASH) 2>/dev/null)" = "$(SOURCES_SHA)" || { rm -rf _build/.jupyter_cache; echo $(SOURCES_SHA) > $(EXEC_HASH); }

# With TeX Live, the whole-book PDF first (it executes the chapters, into jupyter-cache), then the
# site from the same executions, serving it as convres.pdf from every page; without it, no PDF link.
book: $(STAMP) $(ASSETS) experiments executed
	@if command -v xelatex >/dev/null && command -v latexmk >/dev/null; then $(MAKE) --no-print-directory pdf \
	  || echo "make book: the PDF failed (above); the site links no PDF"; \
	else echo "make book: no TeX Live (xelatex, latexmk), so the site links no PDF (make pdf installs it)"; fi
	$(BIN)/jupyter-book build --all book

check: lint unit

lint: $(STAMP)
	$(BIN)/ruff check convres benchmarks conftest.py
	$(BIN)/mypy

unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile tests $(addprefix --ignore=,$(SITE_TESTS))

# The experiments before a build, one process a core (the longest first), into the results cache the
# chapters read; the strict build executes each chapter once (nb_execution_raise_on_error).
LONGEST     = jena theorem_separation simulations theorem_width_seeds
RECORDS     = $(shell $(BIN)/python -c "from convres.experiments import EXPERIMENTS; print(*EXPERIMENTS)")
EXPERIMENTS = $(filter $(RECORDS),$(LONGEST)) $(filter-out $(LONGEST),$(RECORDS))

experiments: $(STAMP) data
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -j $(JOBS) $(addprefix experiment-,$(EXPERIMENTS))

experiment-%:
	$(BIN)/python -m convres reproduce $* --out _build/figures > /dev/null

strict-build: $(STAMP) $(ASSETS) experiments executed
	OMP_NUM_THREADS=1 $(BIN)/jupyter-book build --all book -W -n --keep-going

# Every page of _build/html in headless Chromium (offline), the links, the line lengths: one process a core.
browser: $(STAMP)
	CONVRES_SITE_REQUIRED=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n $(JOBS) --dist load --durations=8 $(SITE_TESTS)

test: check strict-build browser

# The whole-book PDF: Jupyter Book 1's pdflatex builder with XeLaTeX (_config.yml, `latex:`); TeX Live
# installed with apt-get when missing and run as root on Debian, else named; chapters from jupyter-cache.
TEX_PACKAGES := texlive-xetex texlive-latex-recommended texlive-latex-extra \
                texlive-fonts-recommended latexmk lmodern fonts-freefont-otf
PDF          := _build/latex/convres.pdf

pdf: $(STAMP) data executed
	@missing=$$(for p in $(TEX_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q 'install ok installed' || echo $$p; done | tr '\n' ' '); \
	if [ -n "$$missing" ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ] && ! command -v xelatex >/dev/null; then \
	  echo "make pdf needs TeX Live: $$missing (e.g. sudo apt-get install $$missing)"; exit 1; fi
	rm -f $(PDF)
	$(BIN)/jupyter-book build book --builder pdflatex -W -n --keep-going
	@test -s $(PDF) && ! grep -n '^! ' _build/latex/convres.log || { echo "make pdf: LaTeX failed (_build/latex/convres.log)"; exit 1; }
	@echo "make pdf: wrote $(PDF); the next site build (make book) serves it"

clean:
	rm -rf _build
