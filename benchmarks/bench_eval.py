"""The evaluation path: requests per second through `harness.run.evaluate` for the offline
baselines (random, blind: SmolLM2 on the question alone, cascade: Whisper tiny.en -> SmolLM2)
and for a tiny random-weight Qwen2-Audio behind its real adapter (processor, chat template,
batching, decoding) at batch sizes 1, 4 and 16, on CPU.

Per row: requests/s and the harness's share of the wall time (everything that is not the
model: data, audio decoding, prompts, parsing, scoring). Baseline in the same run: the random
adapter, whose model time is nil, so its rate is the harness's own ceiling (`ratio_*_vs_random`);
for the HF adapter also batch 16 against batch 1. Batching must not change the answers: the
per-sample scores, responses and parsed letters at batch 16 are compared with batch 1. Each
adapter answers a warm-up run first (models load lazily), which is reported as `load_s`.

On a GPU machine, `benchmarks/gpu_adapters.py --size full` gives the full-size figures.
"""

from __future__ import annotations

import json
import time

from bench_data import dataset


def _evaluate(adapter, tasks, ds, batch_size: int, limit: int) -> dict:
    from harness.config import EvalConfig
    from harness.run.data import CasuData
    from harness.run.evaluate import evaluate

    # No response cache: every request reaches the model, as in a first run.
    opts = EvalConfig(progress=False, probe=False, batch_size=batch_size, limit=limit)
    t = time.perf_counter()
    ev = evaluate(adapter, tasks, CasuData(ds), opts, None)
    wall = time.perf_counter() - t
    tm = ev["timing"]
    n = tm["units"]
    row = {
        "requests": n,
        "requests_per_s": n / wall,
        "wall_s": wall,
        "model_s": tm["model_s"],
        "harness_share": max(0.0, wall - tm["model_s"]) / wall,
        "harness_ms_per_request": 1000 * max(0.0, wall - tm["model_s"]) / max(1, n),
    }
    answers = {
        (s["task"], s["id"], s["condition"], s["rotation"]): (
            s.get("scores"),
            s.get("response"),
            s.get("parsed"),
        )
        for recs in ev["samples"].values()
        for s in (r.to_dict() for r in recs)  # ScoredRecords, read as their written lines
    }
    return {"row": row, "answers": answers}


def _differences(a: dict, b: dict) -> dict:
    """How two runs' per-sample answers differ: parsed letters, responses, and scores (max |diff|)."""
    keys = sorted(set(a) | set(b))
    parsed = sum(a.get(k, (None,) * 3)[2] != b.get(k, (None,) * 3)[2] for k in keys)
    responses = sum(a.get(k, (None,) * 3)[1] != b.get(k, (None,) * 3)[1] for k in keys)
    score_diff = 0.0
    for k in keys:
        sa, sb = a.get(k, (None,) * 3)[0], b.get(k, (None,) * 3)[0]
        if sa is not None and sb is not None:
            score_diff = max(score_diff, *(abs(x - y) for x, y in zip(sa, sb)))
    return {
        "samples": len(keys),
        "parsed_differ": parsed,
        "responses_differ": responses,
        "max_score_abs_diff": score_diff,
    }


def run(quick: bool = False) -> dict:
    import gpu_adapters

    from harness.task.config import load_tasks
    from model_adapters.registry import make_adapter

    ds, what = dataset(quick)
    all_tasks = load_tasks()
    mcq = [t for t in all_tasks.values() if t.output_type == "multiple_choice"]
    limit = 4 if quick else 32  # per task: 16 (quick) or 128 MCQ requests
    out: dict = {"dataset": what, "limit_per_task": limit, "tasks": [t.task for t in mcq], "rows": {}}
    rows = out["rows"]
    for name in ("random", "blind", "cascade"):
        t = time.perf_counter()
        adapter = make_adapter(name)
        _evaluate(adapter, mcq, ds, 1, 1)  # warm-up: lazy model loading is not request time
        load = time.perf_counter() - t
        r = _evaluate(adapter, mcq, ds, 1, limit)["row"]
        rows[name] = dict(r, load_s=load)
        del adapter
    t = time.perf_counter()
    adapter, n_params = gpu_adapters._build("qwen2-audio", "tiny", "cpu")
    _evaluate(adapter, mcq, ds, 1, 1)
    load = time.perf_counter() - t
    runs = {}
    for bs in (1, 4, 16):
        runs[bs] = _evaluate(adapter, mcq, ds, bs, limit)
        rows[f"tiny_qwen2_audio_bs{bs}"] = dict(runs[bs]["row"], load_s=load, params=n_params)
    base = rows["random"]["requests_per_s"]
    for name, r in rows.items():
        if name != "random":
            out[f"ratio_{name}_vs_random"] = r["requests_per_s"] / base
    out["ratio_tiny_qwen2_audio_bs16_vs_bs1"] = (
        rows["tiny_qwen2_audio_bs16"]["requests_per_s"] / rows["tiny_qwen2_audio_bs1"]["requests_per_s"]
    )
    diff = _differences(runs[1]["answers"], runs[16]["answers"])
    out["batching_bs1_vs_bs16"] = diff
    out["same_answers_bs1_vs_bs16"] = diff["parsed_differ"] == 0 and diff["responses_differ"] == 0
    return out


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
