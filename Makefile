# The two commands: `make train` and `make test` do all the set-up they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: train test lint bench board clean

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

train: $(STAMP)
	$(PY) main.py $(ARGS)

# Two pytest workers (one per core; a file's tests stay on one worker), then the
# asynchronous learning tests (marked `alone`) by themselves on the quiet machine.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not alone" --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -q -m alone $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# TensorBoard on every run under results/ (sweeps included): http://localhost:6006
board: $(STAMP)
	$(VENV)/bin/tensorboard --logdir results --port $(or $(PORT),6006)

bench: $(STAMP)
	$(PY) -m bench.throughput

clean:
	rm -rf $(VENV) .pytest_cache
