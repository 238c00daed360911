"""The peers' REAL Qwen2-Audio model classes on CASU's exported tasks, on CPU, with a tiny
random-weight Qwen2-Audio saved to a local folder (run it with .venv-peers):

    .venv-peers/bin/python scripts/peers_real_models.py --build-small out/peers_small --out out/peers_real
    .venv-peers/bin/python scripts/peers_real_models.py --dataset casu_mini --limit 4 --tasks all
    (make peers-quick: --limit 2 --tasks contextual_reasoning,scene_description, about 30 s)

1. A tiny Qwen2-Audio (2 layers, byte-level tokenizer, random weights; tests/tiny_models.py) is
   built offline and saved with its processor (`save_pretrained`) to OUT/tiny_qwen2_audio.
2. The task folders are written by `python -m harness export-tasks lmms-eval|lm-eval`.
3. lmms-eval 0.7.3's `qwen2_audio` (lmms_eval.models.simple.qwen2_audio.Qwen2_Audio) and lm-eval
   0.4.13's `hf-audiolm-qwen` (lm_eval.models.hf_audiolm.HFAUDIOLMQWEN) load that folder and run
   every task (`limit` rows each) through the peer's own `simple_evaluate` with `include_path`.
4. Recorded on the way, per request: the audio arrays the peer handed to the processor (length,
   dtype, a hash of the samples) and what reached `model.generate` (input_features shape, the
   feature attention mask's length, the number of <|AUDIO|> tokens in input_ids), and whether
   generate returned or raised (lmms-eval's qwen2_audio turns a generate error into an empty reply).
5. Asserts: the run finishes; every scored row had exactly one request whose audio is the row's
   FLAC decoded (the same samples, the file's frame count at 16 kHz) and whose prompt is CASU's;
   generate got input_features whose mask covers ceil(frames / 160) frames and as many <|AUDIO|>
   tokens as the processor computes; generate returned; every reply was scored by CASU's parser
   (the parsed letter and method equal `parse_choice(reply)`, an unparsed reply counted in
   unparsed_rate, never guessed). Exit 1 with the failures; OUT/report.json holds everything.

Neither peer's class runs on CPU as shipped; the script first runs each as shipped (one request)
and records the exact error, then runs it with the smallest change that gets past it, named here:

- lmms-eval qwen2_audio.py: `device_map` other than "auto" becomes f"cuda:{rank}" (so
  from_pretrained puts the weights on CUDA), and with device_map="auto" generate_until moves the
  inputs with `inputs.to("cuda")`. Run: device="cpu", device_map="auto" to load, then the instance's
  `device_map` set to "cpu", so the `inputs.to(self.device)` branch runs. Its module also imports
  librosa (lmms-eval's `[audio]` extra), which must be installed.
- lm-eval hf_audiolm.py: `self.processor(audios=audios, text=...)`: transformers 5 removed the
  `audios` keyword (Qwen2AudioProcessor raises "Found 1 <|AUDIO|> tokens in the text but no audio
  inputs were passed"); and generate_until moves input_ids with `.to("cuda")` unconditionally.
  Before either, `--model hf-audiolm-qwen` itself fails: the lazy registry names a class
  `HFAudioLM` the module does not define (see lm_eval_class). Run: the registry placeholder
  pointed at HFAUDIOLMQWEN, the processor takes `audios=` as `audio=` (what transformers 4.x did),
  and `Tensor.to("cuda")` returns the tensor on CPU while generate_until runs (counted).

Everything else is the peers' own code: their simple_evaluate, task loading, request building,
Collator, chat template / placeholder handling, processor call, generate and decoding.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

HOP = 160  # WhisperFeatureExtractor's hop length: one mel frame per 160 samples
AUDIO_TOKEN = "<|AUDIO|>"


def audio_sha(a) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float32).tobytes()).hexdigest()[:16]


def expected_rows(dataset: Path) -> dict[tuple[str, str], dict]:
    """Per (task, row id): the row's FLAC decoded with soundfile alone (frames, sample rate, a hash
    of the samples) and CASU's prompt, keyed for matching the requests the model saw."""
    import soundfile as sf

    from casu_dataset.formats.reader import BuiltDataset
    from harness.peers.common import TASKS, prompt

    ds = BuiltDataset(dataset)
    out = {}
    for t in TASKS:
        for r in ds.table(t).arrow.to_pylist():
            wav, sr = sf.read(io.BytesIO(r["audio"]["bytes"]), dtype="float32")
            out[(t, r["id"])] = {
                "frames": int(wav.shape[0]),
                "channels": 1 if wav.ndim == 1 else int(wav.shape[1]),
                "sampling_rate": int(sr),
                "sha": audio_sha(wav),
                "prompt": prompt(t, r),
                "options": [str(o) for o in r.get("options") or []],
                "answer": r.get("answer"),
            }
    return out


def build_model(out: Path) -> Path:
    """The tiny random-weight Qwen2-Audio (model + processor, save_pretrained), once."""
    import tiny_models

    folder = out / "tiny_qwen2_audio"
    if not (folder / "config.json").exists() or not (folder / "processor_config.json").exists():
        tiny_models.build_qwen2_audio(folder)
    return folder


def export(peer: str, folder: Path, dataset: Path) -> None:
    cmd = [sys.executable, "-m", "harness", "export-tasks", peer, str(folder), "--dataset", str(dataset)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed (exit {p.returncode}):\n{p.stderr[-2000:]}")


# -- recording what reaches the processor and generate ----------------------------------------------


class Recorder:
    def __init__(self, map_audios: bool = False):
        self.calls: list[dict] = []
        self.map_audios = map_audios  # take the removed `audios=` keyword as `audio=`
        self.cuda_redirects = 0

    def attach(self, processor, model) -> None:
        rec = self
        base = type(processor)

        def __call__(proc, *args, **kwargs):
            import numpy as np

            kw = "audio" if "audio" in kwargs else "audios" if "audios" in kwargs else None
            audios = kwargs.get(kw) if kw else None
            if rec.map_audios and kw == "audios":
                kwargs["audio"] = kwargs.pop("audios")
            text = kwargs.get("text", args[1] if len(args) > 1 else None)
            rec.calls.append(
                {
                    "keyword": kw,
                    "texts": list(text) if isinstance(text, (list, tuple)) else [text],
                    "audio": [
                        {
                            "n": int(np.asarray(a).shape[0]),
                            "ndim": int(np.asarray(a).ndim),
                            "dtype": str(np.asarray(a).dtype),
                            "sha": audio_sha(a),
                        }
                        for a in (audios or [])
                    ],
                    "sampling_rate_kw": kwargs.get("sampling_rate"),
                }
            )
            return base.__call__(proc, *args, **kwargs)

        processor.__class__ = type(f"Recording{base.__name__}", (base,), {"__call__": __call__})
        audio_id = processor.tokenizer.convert_tokens_to_ids(AUDIO_TOKEN)
        real_generate = model.generate

        def generate(*args, **kwargs):
            call = rec.calls[-1] if rec.calls else {}
            feats, mask, ids = kwargs.get("input_features"), kwargs.get("feature_attention_mask"), None
            ids = kwargs.get("input_ids", args[0] if args else None)
            g = {
                "input_features": list(feats.shape) if feats is not None else None,
                "mask_frames": mask.sum(-1).tolist() if mask is not None else None,
                "audio_tokens": (ids == audio_id).sum(-1).tolist() if ids is not None else None,
                "input_len": int(ids.shape[1]) if ids is not None else None,
            }
            call.setdefault("generate", []).append(g)
            try:
                outp = real_generate(*args, **kwargs)
            except Exception as err:
                g["error"] = f"{type(err).__name__}: {err}"
                raise
            g["new_tokens"] = int(outp.shape[1]) - g["input_len"] if g["input_len"] else None
            return outp

        model.generate = generate


@contextlib.contextmanager
def cuda_to_cpu(rec: Recorder):
    """While active, `Tensor.to("cuda")` on a machine without CUDA returns the tensor (counted)."""
    import torch

    real = torch.Tensor.to

    def to(self, *args, **kwargs):
        dev = args[0] if args else kwargs.get("device")
        if not torch.cuda.is_available() and (
            (isinstance(dev, str) and dev.startswith("cuda"))
            or (isinstance(dev, torch.device) and dev.type == "cuda")
        ):
            rec.cuda_redirects += 1
            rest = args[1:] if args else ()
            kwargs.pop("device", None)
            return real(self, *rest, **kwargs) if rest or kwargs else self
        return real(self, *args, **kwargs)

    torch.Tensor.to = to  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.to = real  # type: ignore[method-assign]


def _err(err: BaseException) -> dict:
    """The error, where it was raised, and the innermost line of the peer's own code on the way."""
    tb = traceback.extract_tb(err.__traceback__)

    def fmt(f) -> str:
        return f"{f.filename.split('site-packages/')[-1]}:{f.lineno}: {f.line}" if f else ""

    peer = ("site-packages/lmms_eval/", "site-packages/lm_eval/")
    return {
        "error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
        "at": fmt(next((f for f in reversed(tb) if "site-packages" in f.filename), tb[-1] if tb else None)),
        "peer_at": fmt(next((f for f in reversed(tb) if any(x in f.filename for x in peer)), None)),
    }


# -- the two peers ---------------------------------------------------------------------------------


LMMS_SHIMS = ("device_map",)
LM_SHIMS = ("registry", "audios", "cuda")


def lmms_model(model_dir: Path, shims):
    from lmms_eval.models.simple.qwen2_audio import Qwen2_Audio

    lm = Qwen2_Audio(pretrained=str(model_dir), device="cpu", device_map="auto")
    if "device_map" in shims:
        lm.device_map = "cpu"  # generate_until: `inputs.to("cuda")` only when device_map == "auto"
    return lm


def run_lmms(task_dir: Path, model_dir: Path, tasks: list[str], limit: int, shims=LMMS_SHIMS):
    from lmms_eval.evaluator import simple_evaluate
    from lmms_eval.tasks import TaskManager

    rec = Recorder()
    lm = lmms_model(model_dir, shims)
    rec.attach(lm.processor, lm.model)
    res = simple_evaluate(
        model=lm,
        tasks=tasks,
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
        limit=limit,
        log_samples=True,
        bootstrap_iters=0,
        verbosity="WARNING",
    )
    return res, rec


LM_EVAL_NAME = "hf-audiolm-qwen"
LM_EVAL_CLASS = "lm_eval.models.hf_audiolm:HFAUDIOLMQWEN"


def lm_eval_class(fix_registry: bool):
    """The class `--model hf-audiolm-qwen` names. As shipped, lm-eval 0.4.13's lazy registry
    (lm_eval/models/__init__.py) points the name at `hf_audiolm:HFAudioLM`, a class the module does
    not define; importing the module then registers HFAUDIOLMQWEN under the same name and the
    registry refuses ("already registered"). With `fix_registry`, the placeholder is pointed at the
    class the module defines first, so the registry's placeholder -> class upgrade accepts it."""
    import lm_eval.models  # noqa: F401  (fills the registry with its placeholders, as get_model would)
    from lm_eval.api.registry import get_model, model_registry

    if fix_registry and isinstance(model_registry._objs.get(LM_EVAL_NAME), str):
        model_registry._objs[LM_EVAL_NAME] = LM_EVAL_CLASS
    return get_model(LM_EVAL_NAME)


def run_lm(task_dir: Path, model_dir: Path, tasks: list[str], limit: int, shims=LM_SHIMS):
    import lm_eval
    from lm_eval.tasks import TaskManager

    rec = Recorder(map_audios="audios" in shims)
    lm = lm_eval_class("registry" in shims)(pretrained=str(model_dir), device="cpu", batch_size=1)
    rec.attach(lm.processor, lm.model)
    ctx = cuda_to_cpu(rec) if "cuda" in shims else contextlib.nullcontext()
    with ctx:
        res = lm_eval.simple_evaluate(
            model=lm,
            tasks=tasks,
            task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
            limit=limit,
            log_samples=True,
            bootstrap_iters=0,
        )
    return res, rec


def probe_run(run, task_dir: Path, model_dir: Path, task: str, shims) -> dict:
    """One request through the class with only `shims` (none: as shipped, CPU asked for): the
    error it stops with."""
    t0 = time.perf_counter()
    try:
        run(task_dir, model_dir, [task], 1, shims=shims)
        out: dict = {"finished": True}
    except Exception as err:  # the point: record why it stops
        out = {"finished": False, **_err(err)}
    out["shims"] = list(shims)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


# -- checks ------------------------------------------------------------------------------------------


def check(
    peer: str, res: dict, rec: Recorder, want: dict, limit: int, tasks: list[str]
) -> tuple[list[str], dict]:
    """The failures, and a summary of what each request carried."""
    from harness.peers.common import MCQ_TASKS
    from harness.scoring.parsing import parse_choice

    fails: list[str] = []
    by_key: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for (task, rid), w in want.items():
        by_key.setdefault((w["sha"], w["prompt"]), []).append((task, rid))
    seen: dict[tuple[str, str], dict] = {}
    for i, call in enumerate(rec.calls):
        if len(call["audio"]) != 1 or len(call["texts"]) != 1:
            fails.append(f"{peer} request {i}: {len(call['audio'])} audio arrays, {len(call['texts'])} texts")
            continue
        a, text = call["audio"][0], call["texts"][0] or ""
        hits = [tr for (sha, p), trs in by_key.items() if sha == a["sha"] and p in text for tr in trs]
        if len(hits) != 1:
            fails.append(f"{peer} request {i}: audio {a} / prompt matches {len(hits)} rows, not one")
            continue
        key = hits[0]
        w = want[key]
        if key in seen:
            fails.append(f"{peer} {key}: sent twice")
        seen[key] = call
        if (a["n"], a["ndim"], a["dtype"], w["sampling_rate"], w["channels"]) != (
            w["frames"],
            1,
            "float32",
            16000,
            1,
        ):
            fails.append(f"{peer} {key}: audio {a} != the row's FLAC: {w}")
        gens = call.get("generate") or []
        if len(gens) != 1:
            fails.append(f"{peer} {key}: generate called {len(gens)} times for the request")
            continue
        g = gens[0]
        if g.get("error"):
            fails.append(f"{peer} {key}: generate raised {g['error']}")
        if g["input_features"] is None or g["input_features"][:2] != [1, 128]:
            fails.append(f"{peer} {key}: input_features {g['input_features']} (want [1, 128, frames])")
        mask_want = math.ceil(w["frames"] / HOP)
        if g["mask_frames"] != [mask_want]:
            fails.append(f"{peer} {key}: feature mask covers {g['mask_frames']}, want [{mask_want}]")
        else:
            tokens_want = (((mask_want - 1) // 2 + 1) - 2) // 2 + 1  # Qwen2-Audio's encoder + pooling
            if g["audio_tokens"] != [tokens_want]:
                fails.append(f"{peer} {key}: {g['audio_tokens']} <|AUDIO|> tokens, want [{tokens_want}]")
        if not g.get("new_tokens"):
            fails.append(f"{peer} {key}: generate returned no new tokens")
    summary: dict = {}
    for task in tasks:
        samples = res.get("samples", {}).get(task)
        if samples is None:
            fails.append(f"{peer} {task}: no samples in the results")
            continue
        n_rows = sum(1 for t, _ in want if t == task)
        if len(samples) != min(limit, n_rows):
            fails.append(f"{peer} {task}: {len(samples)} samples scored, want {min(limit, n_rows)}")
        mcq = task in MCQ_TASKS
        unparsed = 0
        rows = []
        for s in samples:
            # lmms-eval's `acc` item is CASU's dict; lm-eval's `acc` is the 0/1, its `family_acc` the dict
            item = s["acc"] if mcq and isinstance(s.get("acc"), dict) else s["family_acc" if mcq else "bleu"]
            rid = item["id"]
            reply = s["resps"][0][0] if s.get("resps") else None
            call = seen.get((task, rid))
            if call is None:
                fails.append(f"{peer} {task} {rid}: scored, but no request with its audio reached the model")
            if mcq:
                w = want[(task, rid)]
                pc = parse_choice(reply or "", w["options"])
                if (item["parsed"], item["method"]) != (pc.letter, pc.method):
                    fails.append(
                        f"{peer} {task} {rid}: scored {item['parsed']!r}/{item['method']!r}, CASU's parser "
                        f"reads {pc.letter!r}/{pc.method!r} in {reply!r}"
                    )
                if item["correct"] != (item["parsed"] is not None and item["parsed"] == w["answer"]):
                    fails.append(f"{peer} {task} {rid}: correctness {item['correct']} disagrees")
                unparsed += item["parsed"] is None
            elif item["response"] != reply and item["response"] != (reply or "").strip():
                fails.append(f"{peer} {task} {rid}: scored {item['response']!r}, the reply was {reply!r}")
            rows.append(
                {
                    "id": rid,
                    "frames": want[(task, rid)]["frames"],
                    "audio_len_seen": call["audio"][0]["n"] if call else None,
                    "input_features": (call.get("generate") or [{}])[0].get("input_features")
                    if call
                    else None,
                    "mask_frames": (call.get("generate") or [{}])[0].get("mask_frames") if call else None,
                    "audio_tokens": (call.get("generate") or [{}])[0].get("audio_tokens") if call else None,
                    "reply": (reply or "")[:80],
                    **({"parsed": item["parsed"], "method": item["method"]} if mcq else {}),
                }
            )
        r = res["results"][task]
        if mcq:
            got = r.get("unparsed_rate,none")
            if samples and (got is None or abs(got - unparsed / len(samples)) > 1e-9):
                fails.append(
                    f"{peer} {task}: unparsed_rate {got}, the samples give {unparsed}/{len(samples)}"
                )
        summary[task] = {
            "rows": rows,
            "metrics": {k: v for k, v in r.items() if k.endswith(",none") and not isinstance(v, str)},
        }
    if not rec.calls:
        fails.append(f"{peer}: no request reached the processor")
    return fails, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--dataset", help="a built CASU dataset folder")
    g.add_argument(
        "--build-small", metavar="DIR", help="build two shipped families into DIR/data and use them"
    )
    p.add_argument("--out", default="out/peers_real", help="working folder (model, task folders, report)")
    p.add_argument("--limit", type=int, default=2, help="rows per task (default 2)")
    p.add_argument("--peers", default="lmms-eval,lm-eval", help="which peers (comma-separated)")
    p.add_argument("--tasks", default="all", help="CASU tasks (comma-separated; default all five)")
    p.add_argument("--no-probe", action="store_true", help="skip running each class as shipped first")
    a = p.parse_args(argv)
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TQDM_DISABLE", "1")):
        os.environ.setdefault(k, v)
    import peers_compare

    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dataset = (
        peers_compare.build_small(Path(a.build_small).resolve())
        if a.build_small
        else Path(a.dataset).resolve()
    )
    if not dataset.is_dir():
        sys.exit(f"peers_real_models: --dataset {a.dataset}: no such folder")
    from harness.peers.common import TASKS

    tasks = list(TASKS) if a.tasks == "all" else [t for t in a.tasks.split(",") if t]
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        sys.exit(f"peers_real_models: --tasks {','.join(bad)}: not CASU tasks ({', '.join(TASKS)})")
    peers = [x for x in a.peers.split(",") if x]
    return run_all(dataset, out, a.limit, peers, tasks, probe=not a.no_probe).rc


@dataclass
class Result:
    rc: int
    report: dict
    want: dict  # (task, row id) -> the row's audio and prompt
    runs: dict = field(default_factory=dict)  # peer -> (its simple_evaluate results, Recorder)


def run_all(
    dataset: Path, out: Path, limit: int, peers: list[str], tasks: list[str], probe: bool = True
) -> Result:
    from importlib.metadata import version

    seconds: dict = {}
    t0 = time.perf_counter()
    want = expected_rows(dataset)
    model_dir = build_model(out)
    seconds["model"] = round(time.perf_counter() - t0, 2)
    report: dict = {
        "dataset": str(dataset),
        "model": str(model_dir),
        "limit": limit,
        "tasks": tasks,
        "versions": {k: version(k) for k in ("lmms-eval", "lm-eval", "transformers", "torch")},
        "peers": {},
        "seconds": seconds,
    }
    fails: list[str] = []
    runs: dict = {}
    runners = {
        "lmms-eval": (run_lmms, "qwen2_audio", LMMS_SHIMS),
        "lm-eval": (run_lm, LM_EVAL_NAME, LM_SHIMS),
    }
    for peer in peers:
        run, name, shims = runners[peer]
        task_dir = out / f"tasks_{peer.replace('-', '_')}"
        entry: dict = {"model": name}
        t0 = time.perf_counter()
        try:
            export(peer, task_dir, dataset)
            if probe:  # as shipped, then with each shim added in turn: what stops it without the next
                entry["probes"] = [
                    probe_run(run, task_dir, model_dir, tasks[0], shims[:k]) for k in range(len(shims))
                ]
            t1 = time.perf_counter()
            res, rec = run(task_dir, model_dir, tasks, limit)
            entry["seconds_run"] = round(time.perf_counter() - t1, 2)
            runs[peer] = (res, rec)
        except Exception as err:
            entry.update(_err(err))
            fails.append(
                f"{peer} {name}: the run stopped: {entry['error']} at {entry['at']} (in {entry['peer_at']})"
            )
            report["peers"][peer] = entry
            continue
        f, summary = check(peer, res, rec, want, limit, tasks)
        entry.update(
            requests=len(rec.calls),
            processor_keyword=sorted({c["keyword"] for c in rec.calls if c["keyword"]}),
            cuda_redirects=rec.cuda_redirects,
            tasks=summary,
        )
        seconds[peer] = round(time.perf_counter() - t0, 2)
        report["peers"][peer] = entry
        fails += f
    report["failures"] = fails
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    for peer, e in report["peers"].items():
        for s in e.get("probes", []):
            shims = f"with {'+'.join(s['shims'])}" if s["shims"] else "as shipped"
            what = "finished" if s["finished"] else f"{s['error']} (at {s['peer_at'] or s['at']})"
            print(f"  {peer} {e['model']} {shims}: {what} [{s['seconds']} s]")
        if "tasks" in e:
            lens = sorted({r["audio_len_seen"] for t in e["tasks"].values() for r in t["rows"]} - {None})
            print(
                f"  {peer} {e['model']}: {e['requests']} requests in {e['seconds_run']} s, audio lengths "
                f"{lens}, processor keyword {e['processor_keyword']}, cuda->cpu {e['cuda_redirects']}"
            )
            for t, s in e["tasks"].items():
                m = ", ".join(f"{k.split(',')[0]} {v:.3g}" for k, v in s["metrics"].items() if v is not None)
                print(f"    {t}: {len(s['rows'])} rows; {m}")
    if fails:
        print(f"peers_real_models: {len(fails)} failure(s) ({out / 'report.json'}):", file=sys.stderr)
        for x in fails[:30]:
            print(f"  {x}", file=sys.stderr)
        return Result(1, report, want, runs)
    print(
        f"peers_real_models: {', '.join(peers)}: the real Qwen2-Audio classes took CASU's audio "
        f"({out / 'report.json'})"
    )
    return Result(0, report, want, runs)


if __name__ == "__main__":
    sys.exit(main())
