# The two commands: `make train` and `make test` do all the set-up they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: train test lint bench board docs clean

# pip byte-compiles what it installs one file at a time (about 50 of the set-up's 77 s on 2
# cores); compileall does the same on every core. Like pip, it skips the few files it
# cannot compile (some of torch's are written for newer Pythons).
define COMPILE
import compileall, sysconfig
compileall.compile_dir(sysconfig.get_path('purelib'), quiet=2, workers=0)
endef
export COMPILE

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	$(PY) -c "$$COMPILE"
	touch $(STAMP)

train: $(STAMP)
	$(PY) main.py $(ARGS)

# Two pytest workers (one per core; a file's tests stay on one worker; the longest files
# first, tests/conftest.py), then the asynchronous learning tests (marked `alone`) by
# themselves on the quiet machine.
# The docs are checked there too: tests/test_docs.py compares docs/flags.md with
# docs/gen_flags.py's output and runs `mkdocs build --strict` into a temporary directory.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not alone" --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -q -m alone $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# TensorBoard on every run under results/ (sweeps included): http://localhost:6006
board: $(STAMP)
	$(VENV)/bin/tensorboard --logdir results --port $(or $(PORT),6006)

# The documentation site: the flags reference regenerated from training/flag_spec.py and
# the table of which features compose from tests/pairs.py, then a strict MkDocs build into
# site/ (any warning fails it)
docs: $(STAMP)
	$(PY) docs/gen_flags.py
	$(PY) docs/gen_pairs.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP)
	$(PY) -m bench.throughput

clean:
	rm -rf $(VENV) .pytest_cache site
