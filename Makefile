# Two commands do all set-up on a fresh machine (see README.md):
#   make book   - create/reuse .venv, install, build the HTML book (clean, strict), English and Chinese
#   make test   - create/reuse .venv, install, run every test (library, notebooks, book build)
# Both need python3 (>= 3.10); `make book` also needs node/npm (for the offline JavaScript).
#   make lab    - JupyterLab with the course's environment (students: chapters and exercises)

PYTHON  ?= python3
# Extra pip options for the install, e.g. PyTorch's CPU-only index (README.md).
PIP_EXTRA ?=
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
TIMED   := scripts/timed.sh
# Local copies of the data sets (see README.md, "Data"); otherwise the loaders
# download into a user cache.
ifneq ($(wildcard ../shared/data),)
export COURSE_LIB_DATA ?= $(abspath ../shared/data)
endif
export PYTHONHASHSEED := 0
export MPLBACKEND := Agg

.PHONY: book test install test-lib lab clean

$(STAMP): pyproject.toml course_lib/__init__.py  # __init__.py holds the version: reinstall its metadata
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PIP_EXTRA) -e ".[dev]"
	touch $(STAMP)

# JupyterLab in this environment shows Chinese with the course's font (no system CJK font needed).
LABFONT := $(VENV)/etc/jupyter/.course-lab-font
$(LABFONT): $(STAMP) scripts/install_lab_font.py
	$(PY) scripts/install_lab_font.py
	touch $(LABFONT)

install: $(STAMP) $(LABFONT)

book: $(STAMP)
	$(TIMED) "vendor offline JavaScript" scripts/vendor_js.sh
	rm -rf _build
	$(TIMED) "book build (clean, strict)" $(VENV)/bin/jupyter-book build . -W --keep-going
	$(TIMED) "Chinese edition (same executed notebooks, strict)" $(PY) scripts/i18n.py build
	@echo "Open _build/html/index.html (English) or _build/html/zh/index.html (中文)"

test-lib: $(STAMP)
	$(TIMED) "library tests" $(PY) -m pytest tests/lib -q

test: $(STAMP) $(LABFONT)
	scripts/test_all.sh $(PY)

# JupyterLab with the course's environment, opened on the repository (chapters in
# book/, exercises in exercises/). Extra options: make lab LAB_ARGS="--no-browser --port 8889"
LAB_ARGS ?=
lab: $(STAMP) $(LABFONT)
	$(VENV)/bin/jupyter lab $(LAB_ARGS)

clean:
	rm -rf _build .pytest_cache
