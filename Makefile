# The README's commands. Each creates .venv when missing (or when pyproject.toml changed).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAMPLE := fixtures/sample-logdir

.PHONY: demo test test-quick bench lint clean

$(BIN)/.installed: pyproject.toml setup.py $(wildcard kltool/format/_speedups_c/*.c kltool/format/_speedups_c/*.h)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark,bench]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/kltool info $(SAMPLE)
	$(BIN)/kltool verify $(SAMPLE)
	$(BIN)/kltool dump --records --limit 5 $(SAMPLE)/lsx1-0
	$(BIN)/kltool --json dump --records --limit 2 $(SAMPLE)/lsx1-0

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

# The edit loop: everything but the tests marked slow (Spark sessions, kill-at-every-step, big property runs).
test-quick: $(BIN)/.installed
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(BIN)/.installed
	$(BIN)/ruff check .

bench: $(BIN)/.installed
	$(BIN)/python bench/gen_segment.py
	$(BIN)/python bench/bench_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis bench/out
