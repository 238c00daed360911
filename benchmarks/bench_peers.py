"""CASU's harness beside the real lmms-eval 0.7.3 (and lm-eval 0.4.13), side by side: the same
multiple-choice tasks (those with rows) over the same dataset and the same fixed answers (a replay
model in each, harness/peers/), timed in one run. Each model call only looks replies up, so what is
measured is the harness: reading the dataset, decoding each request's audio (every harness hands the model
mono float32 at 16 kHz), building prompts, parsing replies and aggregating.

CASU runs in this process (`evaluate` with `model_adapters.replay.Replay(audio=true)`, no response
cache); the peers in the peers environment (.venv-peers, `scripts/setup_peers.sh`, set up first if
absent), one `simple_evaluate` each, imports timed apart. `harness overhead per request` = (the
evaluation's wall time - the time spent looking replies up) / requests; lmms-eval's replay takes
the audio through the task's doc_to_visual (its protocol: the model decodes) and that time counts
as harness work, as CASU's decoding does. The baseline of the ratios: CASU's figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS_PY = ROOT / ".venv-peers" / "bin" / "python"
MCQ = ["contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning"]


def _responses(ds: Path, path: Path, tasks: list[str]) -> int:
    """A fixed answer per row: the bench scores them like any replies (a mix of forms)."""
    from casu_dataset.formats.reader import BuiltDataset

    forms = ["{k}", "Answer: {w}", "({k}) {t}", "I cannot tell.", "{k} or {w}"]
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for task in tasks:
            for i, r in enumerate(BuiltDataset(ds).rows(task)):
                k = r.answer
                w = "ABCD"[((r.key_index or 0) + 1) % len(r.options)]
                reply = forms[i % len(forms)].format(k=k, w=w, t=r.options[r.key_index or 0])
                f.write(json.dumps({"id": r.id, "task": task, "response": reply}) + "\n")
                n += 1
    return n


def _casu(ds: Path, responses: Path, names: list[str]) -> dict:
    from harness.config import EvalConfig
    from harness.run.data import CasuData
    from harness.run.evaluate import evaluate
    from harness.task.config import load_tasks
    from model_adapters.replay import Replay

    tasks = [t for name, t in load_tasks().items() if name in names]
    t0 = time.perf_counter()
    model = Replay(responses=str(responses), audio=True)
    ev = evaluate(model, tasks, CasuData(ds), EvalConfig(progress=False, probe=False, batch_size=8), None)
    wall = time.perf_counter() - t0
    tm = ev["timing"]
    n = tm["units"]
    return {
        "wall_s": wall,
        "requests": n,
        "model_s": tm["model_s"],
        "audio_decode_s": tm["audio_s"],
        "overhead_ms_per_request": 1000 * (wall - tm["model_s"]) / n,
        "casu_reported_overhead_ms_per_unit": tm["overhead_ms_per_unit"],
        "accuracy": {t: ev["results"][t]["PEB"]["accuracy"]["value"] for t in names},
    }


DRIVER = """
import json, sys, time
t0 = time.perf_counter()
import lmms_eval.evaluator, lm_eval
from lmms_eval.tasks import TaskManager
import harness.peers.lmms_eval_replay as lmms_replay, harness.peers.lm_eval_replay as lm_replay
imports = time.perf_counter() - t0
lmms_dir, lm_dir, responses, tasks = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
out = {"imports_s": imports}
for label in ("cold", "warm"):  # cold: datasets converts the parquet files to its cache first
    t0 = time.perf_counter()
    m = lmms_replay.CasuReplay(responses=responses)
    r = lmms_eval.evaluator.simple_evaluate(model=m, tasks=tasks, bootstrap_iters=0, log_samples=False,
        task_manager=TaskManager(include_path=lmms_dir, include_defaults=False), verbosity="WARNING")
    wall = time.perf_counter() - t0
    out[f"lmms_eval_{label}"] = {"wall_s": wall, "requests": len(m.trace), "lookup_s": m.seconds["lookup"],
        "audio_decode_s": m.seconds["audio"],
        "accuracy": {t: r["results"][t]["acc,none"] for t in tasks}}
t0 = time.perf_counter()
m = lm_replay.CasuReplay(responses=responses)
n = {"n": 0}
orig = m.generate_until
def counted(reqs, disable_tqdm=False):
    n["n"] += len(reqs)
    return orig(reqs, disable_tqdm)
m.generate_until = counted
r = lm_eval.simple_evaluate(model=m, tasks=tasks, bootstrap_iters=0, log_samples=False,
    task_manager=lm_eval.tasks.TaskManager(include_path=lm_dir, include_defaults=False))
out["lm_eval"] = {"wall_s": time.perf_counter() - t0, "requests": n["n"],
    "accuracy": {t: r["results"][t]["acc,none"] for t in tasks}}
print("RESULT " + json.dumps(out))
"""


def _peers(ds: Path, responses: Path, tmp: Path, tasks: list[str]) -> dict:
    from harness.cli.export_tasks import export_tasks

    if not PEERS_PY.exists() or not list((ROOT / ".venv-peers").glob(".casu-peers-*")):
        subprocess.run(["bash", str(ROOT / "scripts" / "setup_peers.sh")], check=True, cwd=ROOT)
    export_tasks("lmms-eval", tmp / "lmms", str(ds))
    export_tasks("lm-eval", tmp / "lm", str(ds))
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TQDM_DISABLE": "1",
        "HF_HOME": str(tmp / "hf"),
    }

    p = subprocess.run(
        [str(PEERS_PY), "-c", DRIVER, str(tmp / "lmms"), str(tmp / "lm"), str(responses), ",".join(tasks)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"the peers' run failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[len("RESULT ") :])


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-12 for k in a)


def run(quick: bool = False) -> dict:
    from bench_data import dataset

    ds, what = dataset(quick)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        responses = tmp / "responses.jsonl"
        from casu_dataset.formats.reader import BuiltDataset

        tasks = [t for t in MCQ if BuiltDataset(ds).table(t).num_rows]  # empty configs: nothing to time
        n = _responses(ds, responses, tasks)
        casu = _casu(ds, responses, tasks)
        peers = _peers(ds, responses, tmp, tasks)
    out: dict = {"dataset": what, "tasks": tasks, "rows": n, "casu": casu, **peers}
    for label in ("cold", "warm"):
        p = peers[f"lmms_eval_{label}"]
        if p["requests"] != casu["requests"] or not _same(p["accuracy"], casu["accuracy"]):
            raise RuntimeError(f"lmms-eval ({label}) and CASU disagree: {p} vs {casu}")
        p["overhead_ms_per_request"] = 1000 * (p["wall_s"] - p["lookup_s"]) / p["requests"]
        out[f"ratio_lmms_eval_{label}_vs_casu_wall"] = p["wall_s"] / casu["wall_s"]
        out[f"ratio_lmms_eval_{label}_vs_casu_overhead"] = (
            p["overhead_ms_per_request"] / casu["overhead_ms_per_request"]
        )
    lm = peers["lm_eval"]
    if lm["requests"] != casu["requests"] or not _same(lm["accuracy"], casu["accuracy"]):
        raise RuntimeError(f"lm-eval and CASU disagree: {lm} vs {casu}")
    lm["ms_per_request"] = 1000 * lm["wall_s"] / lm["requests"]
    out["ratio_lm_eval_vs_casu_wall"] = lm["wall_s"] / casu["wall_s"]
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
