"""The results in lm-eval's own output schema (lm_eval/result_schema.py, lm-eval 0.4.x), for the
tools that read lm-eval output: `results_<stamp>.json` (what EvaluationTracker.save_results_aggregated
writes: simple_evaluate's dict plus `task_hashes` and the GeneralConfigTracker fields) and
`samples_<task>_<stamp>.jsonl` (save_results_samples' lines: doc_id, doc, target, arguments,
resps, filtered_resps, filter, metrics, doc_hash, prompt_hash, target_hash and each metric).
CASU's own, richer document is `casu_results_<stamp>.json` beside them (and its sample records
`casu_samples_<task>_<stamp>.jsonl`): names lm-eval's globs (`/results_`, `/samples_`) never match.

Metric keys are `<metric>,<filter>`: the full-audio condition is lm-eval's `none` filter; the
layer ablations are filters named by their condition (`acc,P__`). Values keep the project's scale
(accuracy 0-1, BLEU-4 0-100); `_stderr` is the half-width of the project's 95% CI divided by
1.96 (the CI is a bootstrap, resampled by contrast family where there are families), "N/A"
where there is no CI. Where lm-eval writes a field CASU cannot know the same way, the field
keeps lm-eval's type and says so (see harness/RESULTS.md)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from casu_dataset.contract import FULL_CONDITION
from harness.output.files import checkpoint, run_key
from harness.scoring.metrics import METRICS


def hash_string(text: str) -> str:
    """lm_eval.utils.hash_string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sanitize_model_name(name: str) -> str:
    """lm_eval.utils.sanitize_model_name."""
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)


def filter_name(condition: str) -> str:
    return "none" if condition == FULL_CONDITION else condition


def _stderr(m: dict):
    ci = m.get("ci95")
    return (ci[1] - ci[0]) / (2 * 1.959964) if ci and None not in ci else "N/A"


def sample_len(conds: dict) -> int:
    """lm-eval's sample_len of a task: its questions scored (the full-audio condition's n)."""
    first: dict = conds.get(FULL_CONDITION) or next(iter(conds.values()), {})
    return first.get("n", 0)


def task_results(task: str, conds: dict, alias: str | None = None) -> dict:
    """lm-eval's results entry of one task (`alias`: its task_alias, else its name)."""
    out: dict = {"name": task, "alias": alias or task, "sample_len": sample_len(conds)}
    for cond, m in conds.items():
        filt = filter_name(cond)
        if m.get("predict_only"):  # lm-eval's predict_only: its "bypass" metric
            out[f"bypass,{filt}"] = 999
            out[f"bypass_stderr,{filt}"] = "N/A"
        for metric in (x for x in METRICS.values() if x.lmeval):
            v = (m.get(metric.name) or {}) if isinstance(m.get(metric.name), dict) else None
            if not v or v.get("value") is None:
                continue
            out[f"{metric.lmeval},{filt}"] = v["value"]
            out[f"{metric.lmeval}_stderr,{filt}"] = _stderr(v)
    return out


def group_scores(group: dict, results: dict) -> dict:
    """lm-eval's Group.aggregate (lm_eval/api/group.py, 0.4.13) over CASU's per-task results: for each
    `aggregate_metric_list` entry and filter (its filter_list, else every filter a member task has
    the metric under; a filter is a condition, `none` the full audio), the mean of the member
    tasks' values, weighted by their sample_len with `weight_by_size` (lm-eval's default), and
    lm-eval's stderr of it (pooled_sample_stderr, or unweighted_mean_stderr; None where a member
    has no interval). -> {condition: {CASU metric name: {value, stderr, n, tasks, weight_by_size}}}"""
    import math

    by_lmeval = {m.lmeval: m for m in METRICS.values() if m.lmeval}
    members = [t for t in group["task"] if t in results]
    out: dict[str, dict] = {}
    for agg in group.get("aggregate_metric_list") or []:
        metric = by_lmeval[agg["metric"]]

        def value_of(task: str, cond: str):
            v = (results[task].get(cond) or {}).get(metric.name)
            return v if isinstance(v, dict) and v.get("value") is not None else None

        filters = agg.get("filter_list") or sorted(
            {filter_name(c) for t in members for c in results[t] if value_of(t, c) is not None}
        )
        for filt in filters:
            cond = FULL_CONDITION if filt == "none" else filt
            found = [(t, value_of(t, cond)) for t in members]
            got = [(t, v) for t, v in found if v is not None]
            if not got:
                continue
            sizes = [sample_len(results[t]) for t, _ in got]
            weights = sizes if agg["weight_by_size"] else [1] * len(got)
            if sum(weights) == 0:
                continue
            value = sum(v["value"] * w for (_, v), w in zip(got, weights)) / sum(weights)
            errs = [_stderr(v) for _, v in got]
            stderr = None
            if "N/A" not in errs:
                if not agg["weight_by_size"]:
                    stderr = math.sqrt(sum(e**2 for e in errs)) / len(errs)
                elif sum(sizes) - len(sizes) > 0:
                    pooled = sum((n - 1) * e**2 * n for n, e in zip(sizes, errs)) / (sum(sizes) - len(sizes))
                    stderr = math.sqrt(pooled / sum(sizes))
            out.setdefault(cond, {})[metric.name] = {
                "value": value,
                "stderr": stderr,
                "n": sum(sizes),
                "tasks": [t for t, _ in got],
                "weight_by_size": agg["weight_by_size"],
            }
    return out


def group_view(name: str, group: dict, results: dict) -> dict:
    """lm-eval's `groups` entry of a group with an aggregate_metric_list: alias, name, sample_len,
    `<metric>,<filter>` and its `_stderr` ("N/A" without one), sample_count."""
    out: dict = {
        "alias": group.get("alias") or name,
        "name": name,
        "sample_len": sum(sample_len(results[t]) for t in group["tasks"] if t in results),
    }
    count: dict[str, int] = {}
    for cond, metrics in (group.get("results") or {}).items():
        for metric_name, v in metrics.items():
            key = f"{METRICS[metric_name].lmeval},{filter_name(cond)}"
            out[key] = v["value"]
            out[f"{METRICS[metric_name].lmeval}_stderr,{filter_name(cond)}"] = (
                "N/A" if v["stderr"] is None else v["stderr"]
            )
            count[key] = v["n"]
    if count:
        out["sample_count"] = count
    return out


def higher_is_better(lmeval_name: str) -> bool:
    """lm-eval's higher_is_better of a metric in its results: the registry's (`bypass`, lm-eval's
    predict_only metric, is True in lm-eval)."""
    if lmeval_name == "bypass":
        return True
    return {m.lmeval: m.higher_is_better for m in METRICS.values() if m.lmeval}[lmeval_name]


def _metric_names(res: dict) -> list[str]:
    """The lm-eval metric names present in a task's results (`acc` from `acc,none`)."""
    names = []
    for k in res:
        if "," in k and "_stderr," not in k:
            m = k.split(",", 1)[0]
            if m not in names:
                names.append(m)
    return names


# -- per-sample lines ---------------------------------------------------------------------------


def _doc(r: dict) -> dict:
    """The document a CASU record answers (lm-eval's `doc`): the question row without its audio."""
    d = {
        "id": r["id"],
        "scene_id": r.get("scene_id"),
        "question": r.get("question"),
        # the row's column as stored, also where a task's choices are something else (doc_options)
        "options": r.get("doc_options") or r.get("options") or [],
        "answer": r.get("answer"),
        "place": r.get("place"),
    }
    for k in ("family_id", "variant", "family_shape"):
        if r.get(k):
            d[k] = r[k]
    if "reference" in r:
        d["reference"] = r["reference"]
    return d


def _sanitize(x):
    """lm_eval.loggers.utils' sanitize_list: every leaf as a string."""
    if isinstance(x, (list, tuple)):
        return [_sanitize(v) for v in x]
    return str(x)


def sample_lines(task: str, records: list[dict], generation: dict | None = None) -> list[dict]:
    """lm-eval's sample lines of one task from CASU's records: one per question and condition
    (filter), its rotations (--circular) as further requests; doc_id is the question's index
    among the evaluated questions of the task, in dataset order."""
    order: dict[str, int] = {}
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        order.setdefault(r["id"], len(order))
        groups.setdefault((r["condition"], r["id"]), []).append(r)
    out = []
    for (cond, qid), rs in groups.items():
        rs = sorted(rs, key=lambda r: r.get("rotation", 0))
        r0 = rs[0]
        mcq = bool(r0.get("options"))  # scene description requests have no options (also when they failed)
        doc = _doc(r0)
        target = r0.get("answer") if mcq else (r0.get("reference") or "")  # a failed request has no reference
        args: dict[str, dict] = {}
        resps: list[list] = []  # per request: lm-eval's list of responses
        filtered: list = []
        for r in rs:
            if r.get("mode") == "loglikelihood":
                base = len(args)
                for j, opt in enumerate(r.get("options") or []):
                    args[f"gen_args_{base + j}"] = {"arg_0": r["prompt"], "arg_1": opt}
                # lm-eval's (log-likelihood, is_greedy); CASU does not compute is_greedy: "None"
                scores = r.get("scores") or [None] * len(r.get("options") or [])
                resps += [[[str(s), "None"]] for s in scores]
                filtered += [[str(s), "None"] for s in scores]
            else:
                # lm-eval writes a generation request's (context, gen_kwargs) with gen_kwargs as an object
                args[f"gen_args_{len(args)}"] = {"arg_0": r["prompt"], "arg_1": dict(generation or {})}
                resps.append([str(r.get("response", ""))])
                # the filter is CASU's answer parser: the letter it read ("" when unparsed)
                filtered.append(str(r.get("parsed") or "") if mcq else str(r.get("response", "")))
        metrics: dict = {}
        if mcq:
            metrics["acc"] = float(bool(r0.get("correct")) and "error" not in r0)
            if len(rs) > 1:
                metrics["circular_acc"] = float(all(bool(r.get("correct")) and "error" not in r for r in rs))
        for metric in METRICS.values():
            if metric.lmeval and metric.sample_key and isinstance(r0.get(metric.sample_key), (int, float)):
                metrics[metric.lmeval] = float(r0[metric.sample_key])
        line = {
            "doc_id": order[qid],
            "doc": doc,
            "target": str(target),
            "arguments": args,
            "resps": resps,
            "filtered_resps": filtered,
            "filter": filter_name(cond),
            "metrics": list(metrics),
            "doc_hash": hash_string(json.dumps(doc, indent=2, ensure_ascii=False)),
            "prompt_hash": hash_string(r0["prompt"]),
            "target_hash": hash_string(str(target)),
        }
        line.update(metrics)
        out.append(line)
    return out


def task_hash(lines: list[dict]) -> str:
    """EvaluationTracker's per-task hash over its sample lines."""
    return hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines))


# -- the aggregated results --------------------------------------------------------------------


def model_name(model: dict) -> str:
    """lm-eval's model_name: the checkpoint (`pretrained=`, an API's `model=`), else the adapter name."""
    return checkpoint(model) or model["name"]


def config_block(doc: Mapping[str, Any]) -> dict:
    """lm-eval's `config` (model, model_args, model_num_parameters, model_dtype, model_revision,
    model_sha, batch_size, batch_sizes, device, use_cache, limit, bootstrap_iters, gen_kwargs,
    random_seed, numpy_seed, torch_seed, fewshot_seed), then CASU's own run settings."""
    cfg = doc.get("config") or {}
    model = doc["model"]
    meta = model.get("meta") or {}
    lm = {
        "model": model["name"],
        "model_args": ",".join(f"{k}={v}" for k, v in (model.get("args") or {}).items()),
        **{
            k: meta[k]
            for k in ("model_num_parameters", "model_dtype", "model_revision", "model_sha")
            if k in meta
        },
        "batch_size": None if cfg.get("batch_size") is None else str(cfg["batch_size"]),  # lm-eval: a string
        "batch_sizes": [],
        "device": (model.get("args") or {}).get("device"),
        "use_cache": cfg.get("use_cache"),
        "limit": cfg.get("limit"),
        "bootstrap_iters": cfg.get("bootstrap_iters"),
        "gen_kwargs": cfg.get("gen_kwargs") or None,
        # the seeds as lm-eval records them (a document from before they were kept apart: its one seed)
        "random_seed": cfg["random_seed"] if "random_seed" in cfg else cfg.get("seed"),
        "numpy_seed": cfg["numpy_random_seed"] if "numpy_random_seed" in cfg else cfg.get("seed"),
        "torch_seed": cfg["torch_random_seed"] if "torch_random_seed" in cfg else cfg.get("seed"),
        "fewshot_seed": cfg["fewshot_random_seed"]
        if cfg.get("fewshot_random_seed") is not None or "numpy_random_seed" in cfg
        else cfg.get("seed"),
    }
    # CASU's run settings after lm-eval's (tasks, task_configs, conditions, scene_hint, ...)
    return {**lm, **{k: v for k, v in cfg.items() if k not in lm}}


def view(doc: Mapping[str, Any]) -> dict:
    """lm-eval's results JSON for one run of the project's document `doc` (without `samples`)."""
    cfg = doc.get("config") or {}
    model = doc["model"]
    tasks = list(doc["results"])
    per_task = (doc.get("evaluated") or {}).get("per_task") or {}
    configs = cfg.get("task_configs") or {}
    results = {t: task_results(t, c, (configs.get(t) or {}).get("alias")) for t, c in doc["results"].items()}
    # lm-eval's groups: every group in group_subtasks; one with an aggregate_metric_list in `groups`
    # and, as lm-eval 0.4.13 writes it, in `results` too
    doc_groups = doc.get("groups") or {}
    groups = {
        g: group_view(g, spec, doc["results"])
        for g, spec in doc_groups.items()
        if spec.get("aggregate_metric_list")
    }
    times = doc.get("run_times") or {}
    env = doc.get("env") or {}
    tok = model.get("tokenizer") or {}
    template = model.get("chat_template")
    name = model_name(model)
    out = {
        "results": {**results, **groups},
        "groups": groups,
        "group_subtasks": {
            **{t: [] for t in tasks},
            **{g: list(spec["tasks"]) for g, spec in doc_groups.items()},
        },
        "configs": {
            t: dict(
                (cfg.get("task_configs") or {}).get(t) or {},
                task=t,
                generation_kwargs=(doc.get("generation") or {}).get(t, {}),
            )
            for t in tasks
        },
        "versions": {
            **{t: (cfg.get("task_versions") or {}).get(t) for t in tasks},
            **{
                g: "N/A" if spec.get("version") is None else str(spec["version"])
                for g, spec in doc_groups.items()
            },
        },
        "n-shot": {**{t: 0 for t in tasks}, **{g: 0 for g in doc_groups}},  # CASU questions are zero-shot
        "higher_is_better": {
            **{t: {m: higher_is_better(m) for m in _metric_names(results[t])} for t in tasks},
            **{g: {m: higher_is_better(m) for m in _metric_names(v)} for g, v in groups.items()},
        },
        "n-samples": {
            t: {
                "original": (per_task.get(t) or {}).get("rows"),
                "effective": (per_task.get(t) or {}).get("samples"),
            }
            for t in tasks
        },
        "config": config_block(doc),
        "git_hash": doc.get("git_hash"),
        "date": times.get("start"),  # lm-eval: the UNIX time the evaluation started (a float)
        "pretty_env_info": env.get("pretty_env_info"),
        "transformers_version": (doc.get("versions") or {}).get("transformers"),
        "upper_git_hash": env.get("upper_git_hash"),
        **{
            k: tok[k]
            for k in (
                "tokenizer_pad_token",
                "tokenizer_eos_token",
                "tokenizer_bos_token",
                "eot_token_id",
                "max_length",
            )
            if k in tok
        },
        "task_hashes": doc.get("task_hashes") or {},
        # EvaluationTracker's GeneralConfigTracker
        "model_source": model["name"],
        "model_name": name,
        "model_name_sanitized": sanitize_model_name(name),
        "system_instruction": cfg.get("system_instruction"),
        "system_instruction_sha": hash_string(cfg["system_instruction"])
        if cfg.get("system_instruction")
        else None,
        "fewshot_as_multiturn": bool(cfg.get("fewshot_as_multiturn")),
        "chat_template": template,
        "chat_template_sha": hash_string(template) if template else None,
        "start_time": times.get("start"),
        "end_time": times.get("end"),
        "total_evaluation_time_seconds": (
            str(times["end"] - times["start"])
            if times.get("start") is not None and times.get("end") is not None
            else None
        ),
        # CASU's extras: its own document, what was evaluated, the headline metric
        "casu": {
            "schema_version": doc.get("schema_version"),
            "date": doc.get("date"),
            "dataset": doc.get("dataset"),
            # the dataset identity its build recorded (lock sha256 + question-config hashes; None without
            # a record)
            "dataset_identity": (doc.get("dataset") or {}).get("identity"),
            "conditions": cfg.get("conditions"),
            "status": doc.get("status"),
            "n_errors": doc.get("n_errors"),
            "run_folder": run_key(model),
            "document": doc.get("casu_document"),
            "chat_template_name": cfg.get("chat_template_name"),
            "apply_chat_template": cfg.get("apply_chat_template"),
        },
    }
    return out
