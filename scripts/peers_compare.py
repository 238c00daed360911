"""CASU's five tasks through CASU's harness, the real lmms-eval 0.7.3 and the real lm-eval 0.4.13,
with the same fixed answers, compared sample by sample (run it with .venv-peers: `make peers`).

    .venv-peers/bin/python scripts/peers_compare.py --dataset casu_mini --out out/peers
    .venv-peers/bin/python scripts/peers_compare.py --build-small out/peers_small --out out/peers_quick

1. A fixed-answer file (`responses.jsonl`): per row, by a hash of its id, a correct letter, a wrong
   letter, a letter with its option's text, an option's text alone, an unparseable reply (nothing,
   two letters, prose), and whole families answered right; per description a copy, a cut, a
   quote of the speech, nothing, or unrelated prose.
2. The task folders (`python -m harness export-tasks lmms-eval|lm-eval`), pointing at the dataset.
3. `python -m harness --model replay --model_args responses=FILE`, lmms-eval's and lm-eval's
   `simple_evaluate` with their replay models (harness/peers/*_replay.py), which take each
   request's audio through the task's doc_to_visual / doc_to_audio and record it.
4. Asserts: the same rows; per row the same prompt (lm-eval's after its `<audio>` placeholder), the
   same reply, the same parsed letter and parse method, the same correctness; every request's audio
   mono float32 at 16 kHz with the file's frame count; per task the same accuracy, family accuracy,
   unparsed rate and scene-description metrics (to 1e-9), and lm-eval's clustered standard error
   equal to lmms-eval's. Exit 1 with the differences, else 0; `report.json` holds everything.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL_FAMILIES = ["ws_ev_my_cue", "ol_first_time_briefing"]  # crossed + slot: every task, 8 scenes
TOL = 1e-9


def h(*parts) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def build_small(out: Path) -> Path:
    """Two shipped families (every task, 8 scenes) built into out/data, once."""
    data = out / "data"
    if (data / "casu_build.json").exists():
        return data
    import yaml

    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY

    docs = {
        f["id"]: f
        for p in sorted(DEFAULT_FAMILY_LIBRARY.glob("*.yaml"))
        for f in yaml.safe_load(p.read_text())
    }
    out.mkdir(parents=True, exist_ok=True)
    lib = out / "families.yaml"
    lib.write_text(yaml.safe_dump([docs[f] for f in SMALL_FAMILIES], sort_keys=False))
    cmd = [sys.executable, "-m", "casu_dataset", "build", "--out", str(data), "--scenarios", str(lib)]
    subprocess.run(cmd + ["--no-check-speech"], check=True, cwd=ROOT)
    return data


def rows_of(dataset: Path) -> dict[str, list[dict]]:
    """Every task's rows (audio left out), read as CASU reads them."""
    from casu_dataset.formats.reader import BuiltDataset
    from harness.peers.common import TASKS

    ds = BuiltDataset(dataset)
    out = {}
    for t in TASKS:
        table = ds.table(t)
        out[t] = table.arrow.drop_columns(["audio"]).to_pylist()
        import soundfile as sf

        frames = [sf.info(io.BytesIO(a["bytes"])).frames for a in table.arrow.column("audio").to_pylist()]
        for r, n in zip(out[t], frames):
            r["_frames"] = n
    return out


MCQ_STYLES = [
    "bare",
    "answer_wrong",
    "letter_text",
    "option_text",
    "none",
    "two",
    "bold",
    "empty",
    "spaced",
    "prose",
]


def mcq_reply(row: dict) -> str:
    opts, key = row["options"], row["answer"]
    letters = "ABCDEFGHIJ"[: len(opts)]
    wrong = letters[(letters.index(key) + 1 + h(row["id"], "w") % (len(opts) - 1)) % len(opts)]
    if h(row.get("family_id") or row["id"], "fam") % 3 == 0:  # whole families right, in mixed forms
        return [key, f"Answer: {key}", f"{key}. {opts[letters.index(key)]}", f"The answer is **{key}**."][
            h(row["id"]) % 4
        ]
    style = MCQ_STYLES[h(row["id"], "style") % len(MCQ_STYLES)]
    pick = letters[h(row["id"], "pick") % len(opts)]
    return {
        "bare": pick,
        "answer_wrong": f"Answer: {wrong}",
        "letter_text": f"({pick}) {opts[letters.index(pick)]}",
        "option_text": f"I think it is {opts[letters.index(pick)].lower()}.",
        "none": "I cannot tell from the recording.",
        "two": f"{key} or {wrong}",
        "bold": f"The correct option is **{pick}**.",
        "empty": "",
        "spaced": f"\n  {pick}",
        "prose": "Hard to say; it could be several things.",
    }[style]


def description_reply(row: dict) -> str:
    ref, turns = row.get("reference") or "", row.get("turns") or []
    k = h(row["id"], "desc") % 5
    if k == 0:
        return ref
    if k == 1:
        return ref[: max(1, len(ref) // 2)]
    if k == 2:
        return "Someone says " + " then ".join(f'"{t}"' for t in turns) + "." if turns else ref
    if k == 3:
        return ""
    return "A quiet room. Nothing much happens."


def write_responses(rows: dict[str, list[dict]], path: Path) -> None:
    from harness.peers.common import MCQ_TASKS

    with path.open("w", encoding="utf-8") as f:
        for task, rs in rows.items():
            for r in rs:
                reply = mcq_reply(r) if task in MCQ_TASKS else description_reply(r)
                f.write(json.dumps({"id": r["id"], "task": task, "response": reply}) + "\n")


def run_casu(dataset: Path, responses: Path, out: Path) -> tuple[dict, dict[str, list[dict]], float]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "harness", "--model", "replay", "--model_args", f"responses={responses}"]
    cmd += ["--tasks", "all", "--dataset", str(dataset), "--output_path", str(out), "--log_samples"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"CASU's harness failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    res = json.loads(Path(glob.glob(str(out / "replay" / "casu_results_*.json"))[0]).read_text())
    samples = {}
    for t in res["results"]:
        (f,) = glob.glob(str(out / "replay" / f"casu_samples_{t}_*.jsonl"))
        samples[t] = [json.loads(line) for line in Path(f).read_text().splitlines() if line.strip()]
    return res, samples, wall


def run_lmms(task_dir: Path, responses: Path, trace: Path) -> tuple[dict, float]:
    from lmms_eval.evaluator import simple_evaluate
    from lmms_eval.tasks import TaskManager

    from harness.peers.lmms_eval_replay import CasuReplay

    trace.unlink(missing_ok=True)
    t0 = time.perf_counter()
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = simple_evaluate(
        model=CasuReplay(responses=str(responses), trace=str(trace)),
        tasks=["casu"],
        task_manager=tm,
        log_samples=True,
        bootstrap_iters=0,
        verbosity="WARNING",
    )
    return res, time.perf_counter() - t0


def run_lm(task_dir: Path, responses: Path, trace: Path) -> tuple[dict, float]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    from harness.peers.lm_eval_replay import CasuReplay

    trace.unlink(missing_ok=True)
    t0 = time.perf_counter()
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = lm_eval.simple_evaluate(
        model=CasuReplay(responses=str(responses), trace=str(trace)),
        tasks=["casu"],
        task_manager=tm,
        log_samples=True,
        bootstrap_iters=1000,
    )
    return res, time.perf_counter() - t0


def _peer_rows(res: dict, task: str, mcq: bool, item_key: str) -> dict[str, dict]:
    out = {}
    for s in res["samples"][task]:
        item = s[item_key]
        resp = s["resps"][0][0] if s.get("resps") else None
        out[item["id"]] = (
            {
                "parsed": item.get("parsed"),
                "method": item.get("method"),
                "correct": item.get("correct"),
                "response": resp,
            }
            if mcq
            else {"response": item["response"]}
        )
    return out


def _trace(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["task"], r["id"]): r for r in map(json.loads, path.read_text().splitlines()) if r}


def _close(a, b) -> bool:
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    return abs(float(a) - float(b)) <= TOL * max(1.0, abs(float(a)))


def compare(rows, casu_res, casu_samples, lmms, lm, lmms_trace, lm_trace) -> tuple[list[str], dict]:
    from harness.peers.common import MCQ_TASKS, TASKS
    from harness.peers.lm_eval_tasks import AUDIO_PLACEHOLDER

    diffs: list[str] = []
    summary: dict = {}
    for task in TASKS:
        mcq = task in MCQ_TASKS
        want = {r["id"]: r for r in rows[task]}
        casu = {s["id"]: s for s in casu_samples.get(task, [])}
        a = _peer_rows(lmms, task, mcq, "acc" if mcq else "bleu")
        b = _peer_rows(lm, task, mcq, "family_acc" if mcq else "bleu")
        for name, got in (("CASU", casu), ("lmms-eval", a), ("lm-eval", b)):
            if set(got) != set(want):
                diffs.append(
                    f"{task}: {name} scored {len(got)} rows, the dataset has {len(want)}: "
                    f"missing {sorted(set(want) - set(got))[:3]}, extra {sorted(set(got) - set(want))[:3]}"
                )
        agree = 0
        for rid in sorted(set(want) & set(casu) & set(a) & set(b)):
            c = casu[rid]
            ta, tb = lmms_trace.get((task, rid)), lm_trace.get((task, rid))
            row_diffs = []
            if ta is None or tb is None:
                row_diffs.append("no request reached a replay model")
            else:
                if ta["prompt"] != c["prompt"]:
                    row_diffs.append(f"lmms-eval prompt {ta['prompt']!r} != CASU {c['prompt']!r}")
                if tb["prompt"] != AUDIO_PLACEHOLDER + c["prompt"]:
                    row_diffs.append(f"lm-eval prompt {tb['prompt']!r} != <audio> + CASU {c['prompt']!r}")
                for name, tr in (("lmms-eval", ta), ("lm-eval", tb)):
                    au = tr.get("audio") or []
                    if [(x["sampling_rate"], x["dtype"], x["ndim"], x["n"]) for x in au] != [
                        (16000, "float32", 1, want[rid]["_frames"])
                    ]:
                        row_diffs.append(
                            f"{name} audio {au} != one mono float32 16 kHz array of "
                            f"{want[rid]['_frames']} frames"
                        )
            if mcq:
                for name, p in (("lmms-eval", a[rid]), ("lm-eval", b[rid])):
                    for k in ("parsed", "method", "correct"):
                        if p[k] != c[k]:
                            row_diffs.append(
                                f"{name} {k} {p[k]!r} != CASU {c[k]!r} (reply {c['response']!r})"
                            )
            else:
                # lmms-eval strips a reply before process_results (api/task.py); CASU and lm-eval do not
                for name, p, want_text in (
                    ("lmms-eval", a[rid], (c["response"] or "").strip()),
                    ("lm-eval", b[rid], c["response"] or ""),
                ):
                    if p["response"] != want_text:
                        row_diffs.append(f"{name} description {p['response']!r} != CASU {c['response']!r}")
            diffs += [f"{task} {rid}: {d}" for d in row_diffs]
            agree += not row_diffs
        cr = casu_res["results"][task]["PEB"]
        names = (
            [("acc", "accuracy"), ("family_acc", "family_accuracy"), ("unparsed_rate", "unparsed_rate")]
            if mcq
            else [
                ("bleu", "bleu4"),
                ("bertscore", "bertscore"),
                ("event_match", "event_match"),
                ("one_minus_wer", "one_minus_wer"),
            ]
        )
        agg = {}
        for lm_name, casu_name in names:
            v = {
                "CASU": (cr.get(casu_name) or {}).get("value"),
                "lmms-eval": lmms["results"][task].get(f"{lm_name},none"),
                "lm-eval": lm["results"][task].get(f"{lm_name},none"),
            }
            agg[lm_name] = v
            if not (_close(v["CASU"], v["lmms-eval"]) and _close(v["CASU"], v["lm-eval"])):
                diffs.append(f"{task}: {lm_name} differs: {v}")
        if mcq:
            se = {
                "lmms-eval": lmms["results"][task].get("acc_stderr_clustered,none"),
                "lm-eval": lm["results"][task].get("acc_stderr_clustered,none"),
            }
            agg["acc_stderr_clustered"] = se
            if isinstance(se["lmms-eval"], float) and not _close(se["lmms-eval"], se["lm-eval"]):
                diffs.append(f"{task}: clustered standard error differs: {se}")
        summary[task] = {"rows": len(want), "agree": agree, "aggregates": agg}
    return diffs, summary


@dataclass
class Run:
    rows: dict
    casu_res: dict
    casu_samples: dict
    lmms: dict
    lm: dict
    lmms_trace: dict
    lm_trace: dict
    seconds: dict

    def compared(self) -> tuple:
        return (
            self.rows,
            self.casu_res,
            self.casu_samples,
            self.lmms,
            self.lm,
            self.lmms_trace,
            self.lm_trace,
        )


def run_all(dataset: Path, out: Path) -> Run:
    """The fixed answers, the task folders and the three runs over every row of `dataset`."""
    from harness.cli.export_tasks import ExportError, export_tasks

    out.mkdir(parents=True, exist_ok=True)
    rows = rows_of(dataset)
    responses = out / "responses.jsonl"
    write_responses(rows, responses)
    try:
        export_tasks("lmms-eval", out / "tasks_lmms_eval", str(dataset))
        export_tasks("lm-eval", out / "tasks_lm_eval", str(dataset))
    except ExportError as err:
        raise RuntimeError(str(err)) from None
    n = sum(len(r) for r in rows.values())
    print(f"peers_compare: {n} rows of {dataset}; fixed answers in {responses}", flush=True)
    casu_res, casu_samples, t_casu = run_casu(dataset, responses, out / "casu")
    print(f"  CASU harness (python -m harness --model replay): {t_casu:.1f} s", flush=True)
    lmms, t_lmms = run_lmms(out / "tasks_lmms_eval", responses, out / "trace_lmms_eval.jsonl")
    print(f"  lmms-eval simple_evaluate (casu_replay): {t_lmms:.1f} s", flush=True)
    lm, t_lm = run_lm(out / "tasks_lm_eval", responses, out / "trace_lm_eval.jsonl")
    print(f"  lm-eval simple_evaluate (casu-replay): {t_lm:.1f} s", flush=True)
    return Run(
        rows,
        casu_res,
        casu_samples,
        lmms,
        lm,
        _trace(out / "trace_lmms_eval.jsonl"),
        _trace(out / "trace_lm_eval.jsonl"),
        {"casu": t_casu, "lmms-eval": t_lmms, "lm-eval": t_lm},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--dataset", help="a built CASU dataset folder (every row is compared)")
    g.add_argument(
        "--build-small", metavar="DIR", help="build two shipped families into DIR/data and use them"
    )
    p.add_argument(
        "--out", default="out/peers", help="working folder (responses, task folders, runs, report)"
    )
    a = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # the peers' per-task progress bars
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dataset = build_small(Path(a.build_small).resolve()) if a.build_small else Path(a.dataset).resolve()
    if not dataset.is_dir():
        sys.exit(f"peers_compare: --dataset {a.dataset}: no such folder (build it: make demo, or casu build)")
    try:
        run = run_all(dataset, out)
    except RuntimeError as err:
        sys.exit(f"peers_compare: {err}")
    return finish(run, dataset, out)


def finish(run: Run, dataset: Path, out: Path) -> int:
    """Compare, write out/report.json, print the summary; 1 with the differences, else 0."""
    from importlib.metadata import version

    diffs, summary = compare(*run.compared())
    n = sum(len(r) for r in run.rows.values())
    report = {
        "dataset": str(dataset),
        "rows": n,
        "versions": {k: version(k) for k in ("casu", "lmms-eval", "lm-eval", "torch", "datasets")},
        "seconds": run.seconds,
        "tasks": summary,
        "differences": diffs,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    for task, s in summary.items():
        aggs = ", ".join(f"{k} {v.get('CASU', v.get('lmms-eval'))!s:.8}" for k, v in s["aggregates"].items())
        print(f"  {task}: {s['agree']}/{s['rows']} rows identical in all three; {aggs}")
    if diffs:
        print(f"peers_compare: {len(diffs)} difference(s) (all in {out / 'report.json'}):", file=sys.stderr)
        for d in diffs[:30]:
            print(f"  {d}", file=sys.stderr)
        return 1
    print(
        f"peers_compare: CASU, lmms-eval {version('lmms-eval')} and lm-eval {version('lm-eval')} agree on "
        f"all {n} rows and every aggregate ({out / 'report.json'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
