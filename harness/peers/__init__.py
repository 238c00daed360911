"""CASU's tasks inside the harnesses its users already run: lmms-eval and lm-eval.

`python -m harness export-tasks lmms-eval|lm-eval DIR --dataset D` writes a task folder whose thin
`utils.py` imports from here: `common` (the prompt, audio decoding, answer parsing and metrics, each
CASU's own: harness/task/prompts.py, harness/scoring/parsing.py, harness/scoring/metrics.py),
`lmms_eval_tasks` and `lm_eval_tasks` (each harness's hooks). `lmms_eval_replay` and
`lm_eval_replay` register a model replaying fixed answers (model_adapters/replay.py's file) in each,
for the sample-by-sample comparison in scripts/peers_compare.py. Nothing here imports lmms-eval or
lm-eval except the two replay modules."""
