# CASU: `make demo` and `make test` each set themselves up first.
PY := .venv/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup demo baselines realization2 lint test test-isa bench bench-quick peers peers-quick clean

setup:
	@bash scripts/setup.sh

# Builds CASU-mini v3 (the shipped library, following its realization lock) into ./casu_mini,
# composes the example scenes into ./demo_out, then evaluates, within 20 minutes on 2 cores from
# nothing (after set-up):
# - the offline cascade (Whisper tiny.en -> SmolLM2) on a documented subset of whole families
#   (--limit 32: the first 8 families of each task; Whisper on every variant's mixture is the
#   cost, ~1 s a request: every row would take about an hour),
# - the blind baseline (SmolLM2, question only) on the first 300 rows (75 families) of each MCQ
#   task: ~0.1 s a request unloaded (all 2,604 of 3.1: about 4 minutes; `make baselines` runs them all),
# - the random baseline on every question and description: its request count equals the rows.
# Results: demo_out/results/<model>/results_<date>.md. Every model output is cached: a rerun takes seconds.
demo: setup
	$(PY) -m casu_dataset build --out casu_mini --num-proc 2
	$(PY) -m casu_dataset demo --out demo_out
	$(PY) -m harness --model cascade --tasks all --limit 32 --dataset casu_mini --output_path demo_out/results --log_samples
	$(PY) -m harness --model blind --tasks $(MCQ_TASKS) --limit 300 --dataset casu_mini --output_path demo_out/results --log_samples
	$(PY) -m harness --model random --tasks all --dataset casu_mini --output_path demo_out/results --log_samples
	$(PY) -m harness table demo_out/results

MCQ_TASKS = contextual_reasoning,entity_extraction,role_inference,counterfactual_reasoning

# The blind baseline on every MCQ question of ./casu_mini (after `make demo`; answers cached by content).
baselines: setup
	$(PY) -m harness --model blind --tasks $(MCQ_TASKS) --dataset casu_mini --output_path demo_out/results --log_samples
	$(PY) -m harness table demo_out/results

# Realization 2 of CASU-mini (recording robustness, on request only: `make demo` does not build it):
# the same items with every non-speech layer on another recording of its bank type. Evaluate with
# `python -m harness ... --dataset casu_mini --robustness_dataset casu_mini_r2`.
# It follows realization2.lock.jsonl, which covers all 290 families of 3.1.1 with no skip, so a
# skipped scene fails this build (a library of your own with a one-recording type: --max-skips N).
realization2: setup
	$(PY) -m casu_dataset build --realization 2 --out casu_mini_r2 --num-proc 2

# The linter (ruff: pyproject.toml [tool.ruff]) and the type checker (mypy: [tool.mypy]); either
# failing fails CI (.ci/run runs this before the tests).
lint: setup
	$(PY) -m ruff check casu_dataset harness model_adapters tests benchmarks scripts setup.py
	$(PY) -m mypy casu_dataset harness model_adapters

# pytest exits 5 when it collects no test: that is a failure here, never a silent pass.
# Two workers, whole files each (--dist loadfile): much of the suite waits on subprocesses, servers
# and single-threaded work, so two use the 2 cores better (17 -> ~10 min measured; TEST_WORKERS=0 runs serially).
TEST_WORKERS ?= 2
test: setup
	@$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

# The whole suite under each forced instruction-set setting (casu_dataset/core/isa.py: torch ATen/MKL/oneDNN,
# CTranslate2, numpy, OpenBLAS): other kernels on this machine, which is not another CPU (onnxruntime and
# glibc have no such override). The real-CPUID check is tests/test_cross_cpu.py (qemu-user), in `make test`.
test-isa: setup
	@for s in native avx2 generic; do echo "== ISA setting $$s"; \
	  $(PY) -m casu_dataset.core.isa $$s -- $(PY) -m pytest -q tests || exit 1; done

# The headline figures (full sizes; scaper installed beside for the mixer's baseline).
bench: setup
	@bash scripts/setup_scaper.sh || echo "bench: scaper baseline unavailable; its columns will say why"
	$(PY) benchmarks/run_all.py

# Every bench on small sizes (a few minutes in all): CI runs it, so a bench that breaks fails CI.
bench-quick: setup
	$(PY) benchmarks/run_all.py --quick

# CASU's five tasks in the real lmms-eval 0.7.3 and lm-eval 0.4.13 (.venv-peers, scripts/setup_peers.sh),
# compared with CASU's harness sample by sample on the same fixed answers (scripts/peers_compare.py):
# the same prompts, audio (mono float32, 16 kHz), parsed letters, correctness and aggregates, or exit 1.
# `make peers`: every row of PEERS_DATASET (built here first if absent, as `make demo` builds it);
# `make peers-quick` (CI): two shipped families, built into out/peers_small (about a minute once set up).
PEERS_PY := .venv-peers/bin/python
PEERS_DATASET ?= casu_mini

# Then the peers' real Qwen2-Audio classes (lmms-eval `qwen2_audio`, lm-eval `hf-audiolm-qwen`) with a
# tiny random-weight Qwen2-Audio on CPU (scripts/peers_real_models.py): each request's audio must reach
# generate as the row's FLAC, each reply be scored by CASU's parser (neither class runs on a CPU as
# shipped; the script names each workaround it applies, docs/evaluation.md, "Run CASU from lmms-eval or lm-eval").

peers: setup
	@bash scripts/setup_peers.sh
	@test -d $(PEERS_DATASET) || $(PY) -m casu_dataset build --out $(PEERS_DATASET) --num-proc 2
	$(PEERS_PY) scripts/peers_compare.py --dataset $(PEERS_DATASET) --out out/peers
	$(PEERS_PY) scripts/peers_real_models.py --dataset $(PEERS_DATASET) --out out/peers_real --limit 4

peers-quick: setup
	@bash scripts/setup_peers.sh
	$(PEERS_PY) scripts/peers_compare.py --build-small out/peers_small --out out/peers_quick
	$(PEERS_PY) scripts/peers_real_models.py --build-small out/peers_small --out out/peers_real_quick \
		--limit 2 --tasks contextual_reasoning,scene_description

clean:
	rm -rf demo_out bench_out .pytest_cache
