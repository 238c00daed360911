# CASU: `make demo` and `make test` each set themselves up first.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo test bench clean

setup:
	@bash scripts/setup.sh

# Builds CASU-mini (113 scenes, 377 questions) into ./casu_mini and composes the example
# scenes into ./demo_out. The harness run on the built set comes with the evaluation work.
demo: setup
	$(PY) -m casu_dataset build --out casu_mini --num-proc 2
	$(PY) -m casu_dataset demo --out demo_out

# pytest exits 5 when it collects no test: that is a failure here, never a silent pass.
test: setup
	@$(PY) -m pytest -q tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

bench: setup
	@bash scripts/setup_scaper.sh || echo "bench: scaper baseline unavailable; its columns will say why"
	$(PY) benchmarks/run_all.py

clean:
	rm -rf demo_out bench_out .pytest_cache
