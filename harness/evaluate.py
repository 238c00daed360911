"""One evaluation: tasks x conditions on one model -> a results dict (schema in harness/RESULTS.md)."""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field

from harness import metrics as M
from harness.conditions import FULL, Condition
from harness.data import CasuData
from harness.runner import (
    RunState,
    Unit,
    make_units,
    run_units,
    score_unit,
    settings_for,
)
from harness.task_config import TaskConfig
from model_adapters.base import Adapter

log = logging.getLogger("harness.evaluate")


@dataclass
class EvalOptions:
    conditions: list[Condition] = field(default_factory=lambda: [FULL])
    batch_size: int = 1
    shrink_on_oom: bool = False  # --batch_size auto on CUDA: halve the batch on out-of-memory
    limit: int | float | None = None  # samples per task, or a fraction (0, 1) of each task
    scene_hint: bool = False
    scoring: str = "auto"
    circular: bool = False
    seed: int = 0
    probe: bool = True
    probe_n: int = 3
    judge: object = None  # parsing.LLMJudge or None
    event_matcher: M.EventMatcher | None = None
    bert_model: str | None = None
    progress: bool = True
    system_instruction: str | None = None  # --system_instruction: every request's system turn
    predict_only: bool = False  # lm-eval's predict_only: outputs (and parsed answers), no metrics
    # --robustness_dataset: the second realization's scored records by (task, condition), for the
    # recording_consistency metric (None: no second realization)
    robustness: dict | None = None


def audio_probe(
    adapter: Adapter, data: CasuData, task: TaskConfig, opts: EvalOptions, cache, base_key, state
) -> dict:
    """Ask a few questions on the real audio, on silence and on another scene's audio.

    If no answer (or option score) changes, the audio is probably not reaching the model."""
    if not adapter.uses_audio:
        return {"status": "skipped", "reason": f"{adapter.name} does not take audio"}
    samples = data.samples(task.dataset_config, task.split)
    picked = samples[: opts.probe_n]
    found = [next((o for o in samples if o.scene_id != s.scene_id), None) for s in picked]
    if not picked or any(o is None for o in found):
        return {"status": "skipped", "reason": "needs questions from two different scenes"}
    others = [o for o in found if o is not None]  # every one (checked above)
    units = make_units(
        task, picked, [FULL], adapter, opts.scoring, opts.scene_hint, False, base_key, opts.system_instruction
    )
    probe_units = []
    for u, other in zip(units, others):
        for kind, override in (("real", None), ("silence", "silence"), ("other", other)):
            v = copy.copy(u)
            v.audio_override = override
            v.key = f"{u.key}:probe:{kind}:{other.scene_id if kind == 'other' else ''}"
            probe_units.append((kind, v))
    out = run_units([v for _, v in probe_units], adapter, data, cache, opts.batch_size, state, progress=False)
    per_q = []
    for i in range(len(picked)):
        trio = {kind: out[v.key] for kind, v in probe_units[3 * i : 3 * i + 3]}
        if any("error" in r for r in trio.values()):
            per_q.append(
                {"id": picked[i].id, "error": next(r["error"] for r in trio.values() if "error" in r)}
            )
            continue
        per_q.append(
            {
                "id": picked[i].id,
                "changed_with_silence": trio["real"] != trio["silence"],
                "changed_with_other_audio": trio["real"] != trio["other"],
            }
        )
    changed = any(q.get("changed_with_silence") or q.get("changed_with_other_audio") for q in per_q)
    status = "ok" if changed else ("error" if all("error" in q for q in per_q) else "unchanged")
    return {"status": status, "task": task.task, "questions": per_q}


def _mcq_metrics(recs: list[dict], task: TaskConfig, opts: EvalOptions) -> dict:
    base = [r for r in recs if r["rotation"] == 0]
    ok = [r for r in base if r["method"] != "error"]
    scored = M.Scored(recs, ok, opts)
    res = {"n": len(ok), "n_errors": len(base) - len(ok), **M.compute_metrics(M.MCQ, task.metrics, scored)}
    methods: dict[str, int] = {}
    for r in ok:
        methods[r["method"]] = methods.get(r["method"], 0) + 1
    res["parse_methods"] = dict(sorted(methods.items()))
    res["breakdowns"] = {k: M.breakdown(ok, k) for k in task.breakdowns}
    fam = scored.family
    if fam:
        res["by_family_shape"] = {
            shape: M.family_bootstrap([r for r in fam if r.get("family_shape") == shape], seed=opts.seed)
            for shape in ("slot", "crossed")
            if any(r.get("family_shape") == shape for r in fam)
        }
    return res


def limit_samples(samples: list, limit: int) -> list:
    """The first `limit` samples; in a contrast-family dataset, whole families only (at least
    one), so family accuracy is defined on every family evaluated."""
    if not samples or not samples[0].family_id:
        return samples[:limit]
    order: list[str] = []
    by_fam: dict[str, list] = {}
    for s in samples:
        if s.family_id not in by_fam:
            order.append(s.family_id)
        by_fam.setdefault(s.family_id, []).append(s)
    out: list = []
    for f in order:
        if out and len(out) + len(by_fam[f]) > limit:
            break
        out.extend(by_fam[f])
    return out


def _text_metrics(recs: list[dict], task: TaskConfig, opts: EvalOptions) -> tuple[dict, list[dict]]:
    ok = [r for r in recs if "error" not in r]
    res: dict = {
        "n": len(ok),
        "n_errors": len(recs) - len(ok),
        **M.compute_metrics(M.TEXT, task.metrics, M.Scored(recs, ok, opts)),
    }
    if task.breakdowns and ok and "bertscore" in res:
        res["breakdowns"] = {k: _text_breakdown(ok, k) for k in task.breakdowns}
    return res, recs


def _text_breakdown(recs, key):
    groups: dict[str, list[float]] = {}
    for r in recs:
        groups.setdefault(str(r.get(key)), []).append(r["bertscore_f1"])
    return {k: {"bertscore": sum(v) / len(v), "n": len(v)} for k, v in sorted(groups.items())}


def evaluate(
    adapter: Adapter, tasks: list[TaskConfig], data: CasuData, opts: EvalOptions, cache=None
) -> dict:
    t0 = time.perf_counter()
    state = RunState()
    data.check_all(tasks)
    # The fingerprint hashes the very bytes the samples (and stems) below are parsed from.
    parts = {(t.dataset_config, t.split) for t in tasks}
    if any(not c.is_full for c in opts.conditions):
        parts.add(("scenes", "test"))
        if adapter.uses_audio:  # the stems are checked before any inference, not per sample
            data.check_scenes([s for t in tasks for s in data.samples(t.dataset_config, t.split)])
    ds_fp = data.fingerprint(sorted(parts))
    base_key = [adapter.fingerprint, ds_fp, opts.seed]
    probe_task = next((t for t in tasks if t.output_type == "multiple_choice"), None)
    probe = (
        audio_probe(adapter, data, probe_task, opts, cache, base_key, state)
        if opts.probe and probe_task
        else {"status": "skipped", "reason": "disabled or no multiple-choice task"}
    )
    all_units: list[Unit] = []
    per_task: dict[str, list[Unit]] = {}
    counts: dict[str, dict] = {}
    for t in tasks:
        samples = data.samples(t.dataset_config, t.split)
        rows = len(samples)
        if opts.limit:
            from harness.flags import limit_count

            samples = limit_samples(samples, limit_count(opts.limit, rows))
        units = make_units(
            t,
            samples,
            opts.conditions,
            adapter,
            opts.scoring,
            opts.scene_hint,
            opts.circular,
            base_key,
            opts.system_instruction,
        )
        per_task[t.task] = units
        all_units.extend(units)
        counts[t.task] = {
            "config": t.dataset_config,
            "split": t.split,
            "rows": rows,
            "samples": len(samples),
            "requests": len(units),
        }
    for name, cnt in counts.items():
        log.info(
            "%s: %d of %d rows (%s/%s), %d requests",
            name,
            cnt["samples"],
            cnt["rows"],
            cnt["config"],
            cnt["split"],
            cnt["requests"],
        )
    log.info(
        "dataset fingerprint %s; audio probe %s; %d requests, batch size %d",
        ds_fp,
        probe.get("status"),
        len(all_units),
        opts.batch_size,
    )
    outputs = run_units(
        all_units, adapter, data, cache, opts.batch_size, state, opts.progress, opts.shrink_on_oom
    )
    t_run = time.perf_counter() - t0
    log.info(
        "inference done in %.1f s: %d model calls, %d from the cache", t_run, state.calls, state.cache_hits
    )
    results: dict[str, dict] = {}
    samples_out: dict[str, list[dict]] = {}
    errors: list[dict] = []
    for t in tasks:
        results[t.task] = {}
        samples_out[t.task] = []
        for c in opts.conditions:
            recs = [score_unit(u, outputs[u.key], opts.judge) for u in per_task[t.task] if u.condition == c]
            for r in recs:
                if r.get("error") is not None:
                    errors.append(
                        {
                            "task": t.task,
                            "condition": c.name,
                            "id": r["id"],
                            "rotation": r["rotation"],
                            "error": r["error"],
                        }
                    )
            if opts.predict_only:
                n_err = sum(r.get("error") is not None for r in recs)
                results[t.task][c.name] = {"n": len(recs) - n_err, "n_errors": n_err, "predict_only": True}
            elif t.output_type == "multiple_choice":
                results[t.task][c.name] = _mcq_metrics(recs, t, opts)
            else:
                results[t.task][c.name], recs = _text_metrics(recs, t, opts)
            samples_out[t.task].extend(recs)
    n_units = len(all_units)
    total = time.perf_counter() - t0
    return {
        "results": results,
        "samples": samples_out,
        "errors": errors,
        "audio_probe": probe,
        "dataset_fingerprint": ds_fp,
        "dataset_identity": data.identity,
        # what was evaluated: rows in each task's config, samples taken (--limit), requests
        # (samples x conditions x rotations); the audio probe's extra calls are not counted
        "evaluated": {
            "requests": n_units,
            "samples": sum(c["samples"] for c in counts.values()),
            "conditions": len(opts.conditions),
            "per_task": counts,
        },
        "generation": {t.task: settings_for(t).to_dict() for t in tasks},
        "scoring": {t.task: per_task[t.task][0].mode if per_task[t.task] else None for t in tasks},
        # overhead: everything before scoring that is not the model (data, audio, prompts, cache)
        "timing": {
            "total_s": total,
            "inference_phase_s": t_run,
            "model_s": state.model_seconds,
            "scoring_s": total - t_run,
            "audio_s": data.decode_seconds,
            "units": n_units,
            "model_calls": state.calls,
            "cache_hits": state.cache_hits,
            "overhead_ms_per_unit": 1000 * (t_run - state.model_seconds) / max(1, n_units),
        },
        "truncated_audio": len(state.truncated),
    }
