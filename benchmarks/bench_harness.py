"""Harness overhead per request, model time excluded (target < 5 ms).

A zero-cost adapter answers instantly, so everything measured is the harness: sample
iteration, FLAC decoding, prompt building, cache lookups and writes, parsing and scoring.
Baseline in the same run: a bare loop that only decodes each request's audio with soundfile
(the least any harness must do). Datasets loading is timed separately (once per run)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench_data import dataset

from model_adapters.base import Adapter


class Instant(Adapter):
    name = "instant"

    def generate(self, requests, settings):
        return ["Answer: B" for _ in requests]


def run(quick: bool = False) -> dict:
    from casu_dataset.core.audio_io import decode_bytes
    from casu_dataset.core.llm.cache import ResponseCache
    from harness.config import EvalConfig
    from harness.run.data import CasuData
    from harness.run.evaluate import evaluate
    from harness.task.config import load_tasks

    ds, what = dataset(quick)
    tasks = [t for t in load_tasks().values() if t.output_type == "multiple_choice"]
    data = CasuData(ds)
    t0 = time.perf_counter()
    for t in tasks:
        data.samples(t.dataset_config)
    load_s = time.perf_counter() - t0
    samples = [s for t in tasks for s in data.samples(t.dataset_config)]
    t0 = time.perf_counter()
    for s in samples:
        decode_bytes(s.audio.bytes())
    decode_ms = 1000 * (time.perf_counter() - t0) / len(samples)
    out = {
        "dataset": what,
        "requests": len(samples),
        "datasets_load_s": load_s,
        "baseline_decode_only_ms_per_request": decode_ms,
    }
    with tempfile.TemporaryDirectory() as tmp:
        cache = ResponseCache(Path(tmp) / "cache.sqlite")
        for label in ("cold", "warm"):  # warm: every response from the cache (a resumed run)
            ev = evaluate(
                Instant(), tasks, CasuData(ds), EvalConfig(progress=False, probe=False, batch_size=8), cache
            )
            tm = ev["timing"]
            out[f"{label}_overhead_ms_per_request"] = tm["overhead_ms_per_unit"]
            out[f"{label}_scoring_s"] = tm["scoring_s"]
    out["ratio_cold_overhead_vs_decode_only"] = out["cold_overhead_ms_per_request"] / decode_ms
    out["target_ms"] = 5.0
    out["meets_target"] = out["cold_overhead_ms_per_request"] < 5.0
    return out


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
