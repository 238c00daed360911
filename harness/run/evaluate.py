"""One evaluation: tasks x conditions on one model -> a results dict (schema in harness/RESULTS.md)."""

from __future__ import annotations

import copy
import logging
import time
from typing import Any, Literal

from harness.config import EvalConfig, limit_count, resolve_batch_size
from harness.run.batches import Unit
from harness.run.conditions import FULL, Condition, parse_conditions
from harness.run.data import CasuData
from harness.run.runner import (
    RunState,
    make_units,
    run_units,
    score_unit,
    settings_for,
)
from harness.run.schema import AudioProbe, Evaluation, SampleError, TaskCounts, TaskResults
from harness.scoring import metrics
from harness.scoring.metrics import JudgeEventMatcher, ScoringContext
from harness.scoring.parsing import LLMJudge
from harness.scoring.records import ScoredRecord, as_rows
from harness.task.config import TaskConfig
from model_adapters.base import Adapter

log = logging.getLogger("harness.run.evaluate")


def audio_probe(
    adapter: Adapter,
    data: CasuData,
    task: TaskConfig,
    config: EvalConfig,
    batch_size: int,
    cache,
    base_key,
    state,
) -> AudioProbe:
    """Ask a few questions on the real audio, on silence and on another scene's audio.

    If no answer (or option score) changes, the audio is probably not reaching the model."""
    if not adapter.uses_audio:
        return {"status": "skipped", "reason": f"{adapter.name} does not take audio"}
    samples = data.samples(task.dataset_config, task.split)
    picked = samples[: config.probe_n]
    found = [next((o for o in samples if o.scene_id != s.scene_id), None) for s in picked]
    if not picked or any(o is None for o in found):
        return {"status": "skipped", "reason": "needs questions from two different scenes"}
    others = [o for o in found if o is not None]  # every one (checked above)
    units = make_units(
        task,
        picked,
        [FULL],
        adapter,
        config.scoring,
        config.scene_hint,
        False,
        base_key,
        config.system_instruction,
    )
    probe_units = []
    for u, other in zip(units, others):
        for kind, override in (("real", None), ("silence", "silence"), ("other", other)):
            v = copy.copy(u)
            v.audio_override = override
            v.key = f"{u.key}:probe:{kind}:{other.scene_id if kind == 'other' else ''}"
            probe_units.append((kind, v))
    out = run_units([v for _, v in probe_units], adapter, data, cache, batch_size, state, progress=False)
    per_q: list[dict[str, Any]] = []
    for i in range(len(picked)):
        trio = {kind: out[v.key] for kind, v in probe_units[3 * i : 3 * i + 3]}
        failed = [r.error for r in trio.values() if r.error is not None]
        if failed:
            per_q.append({"id": picked[i].id, "error": failed[0]})
            continue
        per_q.append(
            {
                "id": picked[i].id,
                "changed_with_silence": trio["real"] != trio["silence"],
                "changed_with_other_audio": trio["real"] != trio["other"],
            }
        )
    changed = any(q.get("changed_with_silence") or q.get("changed_with_other_audio") for q in per_q)
    status: Literal["ok", "unchanged", "error"] = (
        "ok" if changed else ("error" if all("error" in q for q in per_q) else "unchanged")
    )
    return {"status": status, "task": task.task, "questions": per_q}


def _mcq_metrics(recs: list[ScoredRecord], task: TaskConfig, context: ScoringContext) -> dict:
    base = [r for r in recs if r.rotation == 0]
    ok = [r for r in base if r.method != "error"]
    scored = metrics.Scored(recs, ok, context)
    res = {
        "n": len(ok),
        "n_errors": len(base) - len(ok),
        **metrics.compute_metrics(metrics.MCQ, task.metrics, scored),
    }
    methods: dict[str, int] = {}
    for r in ok:
        method = str(r.method)
        methods[method] = methods.get(method, 0) + 1
    res["parse_methods"] = dict(sorted(methods.items()))
    rows = as_rows(ok)
    res["breakdowns"] = {k: metrics.breakdown(rows, k) for k in task.breakdowns}
    fam = scored.family
    if fam:
        res["by_family_shape"] = {
            shape: metrics.family_bootstrap(
                [r for r in fam if r.get("family_shape") == shape], seed=context.seed
            )
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


def _text_metrics(
    recs: list[ScoredRecord], task: TaskConfig, context: ScoringContext
) -> tuple[dict, list[ScoredRecord]]:
    ok = [r for r in recs if not r.failed]
    res: dict = {
        "n": len(ok),
        "n_errors": len(recs) - len(ok),
        **metrics.compute_metrics(metrics.TEXT, task.metrics, metrics.Scored(recs, ok, context)),
    }
    if task.breakdowns and ok and "bertscore" in res:
        res["breakdowns"] = {k: _text_breakdown(ok, k) for k in task.breakdowns}
    return res, recs


def _text_breakdown(recs: list[ScoredRecord], key: str) -> dict:
    groups: dict[str, list[float]] = {}
    for r in recs:
        groups.setdefault(str(r.to_dict().get(key)), []).append(r.metrics["bertscore_f1"])
    return {k: {"bertscore": sum(v) / len(v), "n": len(v)} for k, v in sorted(groups.items())}


def generation_record(task: TaskConfig) -> dict:
    """A task's generation settings as recorded (lm-eval's gen_kwargs): `until` only when set."""
    until = task.generation.until
    return {**settings_for(task).to_dict(), **({"until": until} if until else {})}


def evaluate(
    adapter: Adapter,
    tasks: list[TaskConfig],
    data: CasuData,
    config: EvalConfig,
    cache=None,
    *,
    conditions: list[Condition] | None = None,
    judge=None,
    batch: tuple[int, bool] | None = None,
    robustness: dict | None = None,
) -> Evaluation:
    """Run `tasks` x conditions on `adapter` over `data` as `config` says -> the evaluation's
    results, scored samples, errors, audio probe, fingerprints and timing.

    What the caller already resolved from the config may be passed in: `conditions` (default:
    config.conditions parsed), `judge` (an LLM backend for unparsed answers and Event Match),
    `batch` (the starting batch size and whether to halve it on out-of-memory; default from
    config.batch_size and the adapter's device) and `robustness` (the second realization's
    records, for recording_consistency)."""
    t0 = time.perf_counter()
    conds = parse_conditions(config.conditions) if conditions is None else conditions
    batch_size, shrink = (
        resolve_batch_size(
            config.batch_size,
            str(getattr(adapter, "model_args", {}).get("device") or "cpu"),
            config.max_batch_size,
        )
        if batch is None
        else batch
    )
    context = ScoringContext(
        seed=config.seed,
        circular=config.circular,
        bert_model=config.bert_model,
        event_matcher=JudgeEventMatcher(judge) if judge else None,
        robustness=robustness,
    )
    llm_judge = LLMJudge(judge) if judge else None
    state = RunState()
    data.check_all(tasks)
    # The fingerprint hashes the very bytes the samples (and stems) below are parsed from.
    parts = {(t.dataset_config, t.split) for t in tasks}
    if any(not c.is_full for c in conds):
        parts.add(("scenes", "test"))
        if adapter.uses_audio:  # the stems are checked before any inference, not per sample
            data.check_scenes([s for t in tasks for s in data.samples(t.dataset_config, t.split)])
    ds_fp = data.fingerprint(sorted(parts))
    base_key = [adapter.fingerprint, ds_fp, config.seed]
    probe_task = next((t for t in tasks if t.output_type == "multiple_choice"), None)
    probe = (
        audio_probe(adapter, data, probe_task, config, batch_size, cache, base_key, state)
        if config.probe and probe_task
        else {"status": "skipped", "reason": "disabled or no multiple-choice task"}
    )
    all_units: list[Unit] = []
    per_task: dict[str, list[Unit]] = {}
    counts: dict[str, TaskCounts] = {}
    for t in tasks:
        samples = data.samples(t.dataset_config, t.split)
        rows = len(samples)
        if config.limit:
            samples = limit_samples(samples, limit_count(config.limit, rows))
        units = make_units(
            t,
            samples,
            conds,
            adapter,
            config.scoring,
            config.scene_hint,
            config.circular,
            base_key,
            config.system_instruction,
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
        batch_size,
    )
    outputs = run_units(all_units, adapter, data, cache, batch_size, state, config.progress, shrink)
    t_run = time.perf_counter() - t0
    log.info(
        "inference done in %.1f s: %d model calls, %d from the cache", t_run, state.calls, state.cache_hits
    )
    results: TaskResults = {}
    samples_out: dict[str, list[ScoredRecord]] = {}
    errors: list[SampleError] = []
    for t in tasks:
        results[t.task] = {}
        samples_out[t.task] = []
        for c in conds:
            recs = [score_unit(u, outputs[u.key], llm_judge) for u in per_task[t.task] if u.condition == c]
            for r in recs:
                if r.error is not None:
                    errors.append(
                        {
                            "task": t.task,
                            "condition": c.name,
                            "id": r.id,
                            "rotation": r.rotation,
                            "error": r.error,
                        }
                    )
            if config.predict_only:
                n_err = sum(r.failed for r in recs)
                results[t.task][c.name] = {"n": len(recs) - n_err, "n_errors": n_err, "predict_only": True}
            elif t.output_type == "multiple_choice":
                results[t.task][c.name] = _mcq_metrics(recs, t, context)
            else:
                results[t.task][c.name], recs = _text_metrics(recs, t, context)
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
            "conditions": len(conds),
            "per_task": counts,
        },
        "generation": {t.task: generation_record(t) for t in tasks},
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
