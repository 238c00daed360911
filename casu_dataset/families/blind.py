"""Blind readers and the validity report over compiled questions (v2 families and v1 scenes alike):
coverage counts, realisability with the sound bank, answer-letter balance, and two blind baselines
that never hear the audio:

1. embedding chooser: the option whose MiniLM embedding is closest to the question's;
2. SmolLM2-135M scoring each option's log-likelihood as the answer to the question alone
   (length-normalised: mean log-prob per token, lm-eval's acc_norm idea).

A benchmark whose questions need the audio keeps both near chance (25%); the target is <= 35%.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from casu_dataset.contract import DATASET_LETTERS as LETTERS
from casu_dataset.script.scenes import Question, Scene, all_questions

BLIND_TARGET = 0.35
BLIND_SYSTEM = "Answer the multiple-choice question with the single best option."


def coverage(scenes: list[Scene]) -> dict:
    base = [s for s in scenes if not s.variant_of]
    qs = all_questions(scenes)
    return {
        "scenes": len(base),
        "variants": len(scenes) - len(base),
        "questions": len(qs),
        "minimal_pairs": len({q.minimal_pair_id for q in qs if q.minimal_pair_id}),
        "per_task": dict(Counter(q.task for q in qs)),
        "per_speech_type": dict(Counter(s.script.speech_type for s in base)),
        "places": len({s.script.place for s in base}),
        "per_place": dict(Counter(s.script.place for s in base)),
        "event_types": len({t for s in scenes for k, t in s.types.items() if k != "background"}),
        "per_event_type": dict(Counter(t for s in scenes for k, t in s.types.items() if k != "background")),
        "background_types": len({s.types["background"] for s in scenes}),
        "per_answer_letter": {k: v for k, v in sorted(Counter(q.answer for q in qs).items())},
    }


def realisability(scenes: Sequence[Scene], retriever) -> list[dict]:
    """Scenes whose retrieved top clip is not of the intended bank type."""
    bad = []
    for s in scenes:
        items = [("background", s.script.background.description, s.script.background.keywords, "background")]
        items += [(e.id, e.description, e.keywords, "event") for e in s.script.events]
        for key, desc, kws, kind in items:
            top = retriever.search(desc, kws, k=1, kind=kind)[0]
            if top.clip.type != s.types[key]:
                bad.append(
                    {
                        "scene": s.script.id,
                        "layer": key,
                        "intended": s.types[key],
                        "retrieved": top.clip.type,
                        "clip": top.clip.id,
                        "score": round(top.score, 3),
                    }
                )
    return bad


def embedding_chooser(questions: list[Question], embedder) -> np.ndarray:
    q = embedder.encode([x.question for x in questions])
    o = embedder.encode([opt for x in questions for opt in x.options]).reshape(len(questions), 4, -1)
    return np.einsum("nd,nkd->nk", q, o).argmax(axis=1)


def lm_chooser(questions: list[Question], lm) -> tuple[np.ndarray, np.ndarray]:
    """Choices by mean and by summed option log-likelihood given the question text only."""
    mean, total = [], []
    for x in questions:
        msgs = [{"role": "system", "content": BLIND_SYSTEM}, {"role": "user", "content": x.question}]
        lps = lm.option_logprobs(msgs, x.options)
        mean.append(int(np.argmax([lp / n for lp, n in lps])))
        total.append(int(np.argmax([lp for lp, _ in lps])))
    return np.array(mean), np.array(total)


def length_heuristics(questions: list[Question]) -> dict[str, np.ndarray]:
    """Choosers that look only at option length (a common flaw of written MCQ sets)."""
    L = np.array([[len(o) for o in q.options] for q in questions])
    order = np.argsort(-L, axis=1, kind="stable")
    return {"longest option": order[:, 0], "second longest": order[:, 1], "shortest option": order[:, 3]}


def run_blind(questions: list[Question], embedder, lm=None) -> dict:
    res: dict[str, float | dict] = {}
    ch = embedding_chooser(questions, embedder)
    res["embedding chooser (MiniLM)"] = accuracy(questions, ch)
    res["embedding chooser per task"] = per_task(questions, ch)
    if lm is not None:
        mean, total = lm_chooser(questions, lm)
        res["SmolLM2-135M option log-likelihood (mean/token)"] = accuracy(questions, mean)
        res["SmolLM2-135M option log-likelihood (sum)"] = accuracy(questions, total)
        res["SmolLM2 mean per task"] = per_task(questions, mean)
    for k, v in length_heuristics(questions).items():
        res[k] = accuracy(questions, v)
    return res


def accuracy(questions: list[Question], choice: np.ndarray) -> float:
    gold = np.array([LETTERS.index(q.answer) for q in questions])
    return float(np.mean(gold == choice))


def per_task(questions: list[Question], choice: np.ndarray) -> dict:
    gold = np.array([LETTERS.index(q.answer) for q in questions])
    tasks = np.array([q.task for q in questions])
    return {str(t): float(np.mean(gold[tasks == t] == choice[tasks == t])) for t in sorted(set(tasks))}


def format_report(cov: dict, blind: dict, unrealisable: list[dict] | None) -> str:
    lines = [
        "# CASU-mini validity report",
        "",
        f"scenes {cov['scenes']} (+{cov['variants']} minimal-pair variants), questions {cov['questions']}, "
        f"minimal pairs {cov['minimal_pairs']}, places {cov['places']}, event types {cov['event_types']}, "
        f"background types {cov['background_types']}",
        "",
        "| per task | n |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in sorted(cov["per_task"].items())]
    lines += ["", "| speech type | scenes |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in cov["per_speech_type"].items()
    ]
    n = sum(cov["per_answer_letter"].values())
    lines += ["", "| answer letter | n | share |", "|---|---|---|"]
    lines += [f"| {k} | {v} | {v / n:.1%} |" for k, v in cov["per_answer_letter"].items()]
    lines += ["", "| event type | uses |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in sorted(cov["per_event_type"].items())
    ]
    if blind:
        lines += [
            "",
            f"| blind baseline (no audio) | accuracy | target <= {BLIND_TARGET:.0%} |",
            "|---|---|---|",
        ]
        for k, v in blind.items():
            if isinstance(v, float):
                lines.append(f"| {k} | {v:.1%} | {'ok' if v <= BLIND_TARGET else 'OVER'} |")
        for k, v in blind.items():
            if isinstance(v, dict):
                lines += ["", f"{k}: " + ", ".join(f"{t} {a:.1%}" for t, a in v.items())]
    if unrealisable is not None:
        lines += [
            "",
            f"realisability with the embedded bank: {len(unrealisable)} layers retrieve another type",
        ]
        lines += [
            f"- {u['scene']} {u['layer']}: wanted {u['intended']}, got {u['retrieved']} ({u['clip']})"
            for u in unrealisable
        ]
    return "\n".join(lines)
