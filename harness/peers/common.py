"""What every peer harness's CASU task does, each part CASU's own:

- the prompt: the task's `prompt_template` (tasks/*.yaml) through harness/task/prompts.py;
- the audio: the row's FLAC bytes decoded with soundfile (casu_dataset.core.audio_io, as the
  harness reads it), mono float32 at 16 kHz; never torchcodec (it cannot load beside the CPU torch);
- the answer: harness/scoring/parsing.py's layered parser (never a guess);
- the metrics: harness/scoring/metrics.py's registered computations (accuracy, family accuracy,
  unparsed rate, BLEU-4, BERTScore, Event Match, 1 - WER) over per-sample items, and a
  standard error clustered by contrast family.

A peer's `doc` is a dataset row as `datasets` reads the parquet files: every column by name, the
audio a struct `{bytes, path}` (not a declared `datasets.Audio` feature)."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from casu_dataset.contract import mcq_tasks, tasks
from casu_dataset.core.audio_io import SAMPLE_RATE, decode_bytes
from casu_dataset.core.errors import InputError
from harness.scoring import metrics
from harness.scoring.parsing import parse_choice
from harness.scoring.records import ScoredRecord
from harness.task.config import TaskConfig, builtin_tasks_dir, load_task
from harness.task.prompts import build_prompt

MCQ_TASKS: tuple[str, ...] = tuple(mcq_tasks())
TASKS: tuple[str, ...] = tuple(t.name for t in tasks())  # the four MCQ tasks, then scene_description
GROUP = "casu"
CLUSTER_KEY = "family_id"  # a contrast family's variants share speech, question and options
SCORE_KEY = "score"


class PeerTaskError(InputError, ValueError):
    """A row a peer hands over that CASU cannot score (no id, no audio bytes, no options)."""


@functools.lru_cache(maxsize=None)
def casu_task(name: str) -> TaskConfig:
    """CASU's built-in task config (tasks/NAME.yaml, installed as harness/tasks)."""
    if name not in TASKS:
        raise PeerTaskError(f"unknown CASU task {name!r}; one of {', '.join(TASKS)}")
    return load_task(builtin_tasks_dir() / f"{name}.yaml")


def _field(doc: dict, key: str, task: str = ""):
    if key not in doc:
        rid = doc.get("id", "?")
        raise PeerTaskError(f"{task or 'CASU'} row {rid!r}: no {key!r} column (columns: {sorted(doc)})")
    return doc[key]


def prompt(task: str, doc: dict) -> str:
    """The prompt CASU's harness sends for this row (no scene hint, options in stored order)."""
    cfg = casu_task(task)
    options = list(_field(doc, "options", task) or []) if cfg.output_type == "multiple_choice" else []
    return build_prompt(cfg.prompt_template, doc.get("question") or "", options)


def audio(doc: dict) -> dict:
    """The row's audio as every lmms-eval / lm-eval audio model takes it:
    {"array": mono float32 at 16 kHz, "sampling_rate": 16000}, decoded from the FLAC bytes (the
    card declares the column `Audio(decode=False)`, so `datasets` hands over {bytes, path})."""
    a = _field(doc, "audio")
    rid = doc.get("id", "?")
    blob = a.get("bytes") if isinstance(a, dict) else None
    if not blob:
        raise PeerTaskError(
            f"row {rid!r}: column 'audio' has no FLAC bytes (expected a struct {{bytes, path}})"
        )
    return {"array": decode_bytes(blob, f"row {rid!r} audio", SAMPLE_RATE), "sampling_rate": SAMPLE_RATE}


def first_reply(results) -> str:
    """The one generated text a peer hands process_results (results[0]); "" when there is none."""
    r = results[0] if results else ""
    return r if isinstance(r, str) else ""


def score_choice(task: str, doc: dict, response: str) -> dict:
    """One multiple-choice reply scored as CASU scores it: the parsed letter (None: unparsed,
    counted wrong), how it was read, and whether it is the key. The item every MCQ metric reads."""
    options = [str(o) for o in _field(doc, "options", task)]
    key = _field(doc, "answer", task)
    parsed = parse_choice(response or "", options)
    correct = parsed.letter is not None and parsed.letter == key
    return {
        "id": _field(doc, "id", task),
        "task": task,
        CLUSTER_KEY: doc.get(CLUSTER_KEY) or "",
        "parsed": parsed.letter,
        "method": parsed.method,
        "correct": correct,
        SCORE_KEY: 1.0 if correct else 0.0,
    }


def description_item(task: str, doc: dict, response: str) -> dict:
    """One description and what the scene-description metrics compare it with."""
    return {
        "id": _field(doc, "id", task),
        "task": task,
        "response": response or "",
        "reference": _field(doc, "reference", task) or "",
        "event_descriptions": list(doc.get("event_descriptions") or []),
        "turns": list(doc.get("turns") or []),
    }


def _records(items: Sequence[dict]) -> list[ScoredRecord]:
    """Items as CASU's scored records (rotation 0, scored)."""
    return [ScoredRecord.from_row(dict(it, rotation=0, method=it.get("method", "generate"))) for it in items]


def registry_value(name: str, items: Sequence[dict]) -> float | None:
    """The value of CASU's registered metric `name` over these items, computed by the very code
    CASU's harness runs (intervals off: the peers report their own standard errors)."""
    recs = _records(items)
    token = metrics.BOOTSTRAP_ITERS.set(0)
    try:
        res = metrics.METRICS[name].compute(metrics.Scored(recs, recs, metrics.ScoringContext()))
    finally:
        metrics.BOOTSTRAP_ITERS.reset(token)
    if res is None or res.get("value") is None:
        return None
    return float(res["value"])


# -- aggregations (a peer calls each with the list of its per-sample items) ----------------------


def accuracy(items: Sequence[dict]) -> float | None:
    return registry_value("accuracy", items)


def family_accuracy(items: Sequence[dict]) -> float | None:
    """All four variants of a contrast family right (chance 1/256); a family missing variants
    (a limited run) counts for accuracy only, as in CASU."""
    return registry_value("family_accuracy", items)


def unparsed_rate(items: Sequence[dict]) -> float | None:
    return registry_value("unparsed_rate", items)


def bleu4(items: Sequence[dict]) -> float | None:
    return registry_value("bleu4", items)


def bertscore(items: Sequence[dict]) -> float | None:
    return registry_value("bertscore", items)


def event_match(items: Sequence[dict]) -> float | None:
    return registry_value("event_match", items)


def one_minus_wer(items: Sequence[dict]) -> float | None:
    return registry_value("one_minus_wer", items)


def clustered_stderr(scores: Sequence[float], clusters: Sequence[str | None]) -> float:
    """Standard error of a mean of per-sample scores whose samples are correlated within clusters
    (Miller 2024, "Adding Error Bars to Evals", eq. 4): the iid variance plus every within-cluster
    cross term, SE^2 = s^2/n + (1/n^2) sum_c sum_{i != j in c} (x_i - m)(x_j - m). A sample with
    no cluster is its own. NaN for fewer than 2 samples."""
    x = np.asarray(scores, dtype=np.float64)
    n = x.size
    if n < 2:
        return float("nan")
    d = x - x.mean()
    var = float((d**2).sum() / (n - 1) / n)
    groups: dict = defaultdict(float)
    for i, c in enumerate(clusters):
        groups[c if c not in (None, "") else ("__alone__", i)] += d[i]
    # sum over i != j within a cluster = (sum_i d_i)^2 - sum_i d_i^2
    cross = sum(v * v for v in groups.values()) - float((d**2).sum())
    return math.sqrt(max(0.0, var + cross / n**2))


def accuracy_stderr_clustered(items: Sequence[dict]) -> float:
    """The clustered standard error of accuracy, clustered by contrast family."""
    return clustered_stderr([it[SCORE_KEY] for it in items], [it.get(CLUSTER_KEY) for it in items])
