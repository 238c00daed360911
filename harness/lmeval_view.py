"""The results document in lm-eval's output shape, for tools that read lm-eval results
(`results[task]["acc,none"]`, `"acc_stderr,none"`, `versions`, `n-shot`, `configs`, `config`).

Written beside the project's own results JSON as `lm_eval_<stamp>.json` (the project's schema
keeps `results`, `versions` and `config` with its own meaning). Keys are `<metric>,<filter>`:
the full-audio condition is lm-eval's `none` filter; the layer ablations are filters named by
their condition (`acc,P__`). Values keep the project's scale (accuracy 0-1, BLEU-4 0-100);
`_stderr` is the half-width of the project's 95% CI divided by 1.96 (the CI is a bootstrap,
resampled by contrast family where there are families), "N/A" where there is no CI."""
from __future__ import annotations

import hashlib

from casu_dataset.contract import FULL_CONDITION

# project metric -> lm-eval metric name; higher is better for all of them
METRICS = {"accuracy": "acc", "family_accuracy": "family_acc", "circular_accuracy": "circular_acc",
           "paired_accuracy": "paired_acc", "bleu4": "bleu", "bertscore": "bertscore", "event_match": "event_match",
           "one_minus_wer": "one_minus_wer"}


def _stderr(m: dict):
    ci = m.get("ci95")
    return (ci[1] - ci[0]) / (2 * 1.959964) if ci and None not in ci else "N/A"


def task_results(task: str, conds: dict) -> dict:
    out: dict = {"alias": task}
    for cond, m in conds.items():
        filt = "none" if cond == FULL_CONDITION else cond
        for ours, theirs in METRICS.items():
            v = (m.get(ours) or {}) if isinstance(m.get(ours), dict) else None
            if not v or v.get("value") is None:
                continue
            out[f"{theirs},{filt}"] = v["value"]
            out[f"{theirs}_stderr,{filt}"] = _stderr(v)
    return out


def view(doc: dict) -> dict:
    """lm-eval's results JSON for one run of the project's document `doc`."""
    cfg = doc.get("config") or {}
    model = doc["model"]
    tasks = list(doc["results"])
    per_task = (doc.get("evaluated") or {}).get("per_task") or {}
    from .results import run_key
    return {
        "results": {t: task_results(t, c) for t, c in doc["results"].items()},
        "groups": {},
        "group_subtasks": {t: [] for t in tasks},
        "configs": {t: dict((cfg.get("task_configs") or {}).get(t) or {}, task=t,
                            generation_kwargs=(doc.get("generation") or {}).get(t, {}))
                    for t in tasks},
        "versions": {t: (cfg.get("task_versions") or {}).get(t) for t in tasks},
        "n-shot": {t: 0 for t in tasks},  # CASU questions are zero-shot
        "higher_is_better": {t: {v: True for v in METRICS.values()} for t in tasks},
        "n-samples": {t: {"original": (per_task.get(t) or {}).get("rows"),
                          "effective": (per_task.get(t) or {}).get("samples")} for t in tasks},
        "config": {
            "model": model["name"],
            "model_args": ",".join(f"{k}={v}" for k, v in (model.get("args") or {}).items()),
            "batch_size": cfg.get("batch_size"),
            "batch_sizes": [],
            "device": (model.get("args") or {}).get("device"),
            "use_cache": None,
            "limit": cfg.get("limit"),
            "bootstrap_iters": None,
            "gen_kwargs": cfg.get("gen_kwargs") or None,
            "random_seed": cfg.get("seed"),
            "numpy_seed": cfg.get("seed"),
            "torch_seed": cfg.get("seed"),
            "fewshot_seed": None,
        },
        # lm-eval's run-level prompt settings; the template is named, not inlined (the adapter's
        # fingerprint covers its text), so there is no chat_template_sha here
        "system_instruction": cfg.get("system_instruction"),
        "system_instruction_sha": hashlib.sha256(cfg["system_instruction"].encode()).hexdigest()
        if cfg.get("system_instruction") else None,
        "chat_template": cfg.get("chat_template_name"),
        "apply_chat_template": cfg.get("apply_chat_template"),
        "fewshot_as_multiturn": bool(cfg.get("fewshot_as_multiturn")),
        "git_hash": doc.get("git_hash"),
        "date": doc.get("date"),
        "model_name": model["name"],
        "model_name_sanitized": run_key(model),
        "transformers_version": (doc.get("versions") or {}).get("transformers"),
        "casu": {"schema_version": doc.get("schema_version"), "dataset": doc.get("dataset"),
                 "conditions": cfg.get("conditions"), "status": doc.get("status")},
    }
