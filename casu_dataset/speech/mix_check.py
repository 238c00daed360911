"""Mix-level intelligibility: each turn is checked in the mixture, not only clean.

The clean check (intelligibility.py) transcribes each synthesised turn alone; an event placed
during a turn can still bury it in the mix. Per turn, inside the turn's span:

- the speech-to-rest ratio: K-weighted power of the speech stem over that of background +
  events, in dB (cheap; always computed);
- Whisper on the mixture segment, scored against the turn text with the clean check's
  normaliser, only for turns that need it: overlapped by an event (or another turn), or with
  a ratio below `whisper_below_db`. Transcripts are cached by (segment hash, text, model).

A turn fails when its ratio is below `min_ratio_db`, or when its mixture WER is above max_wer
and above its clean WER (a turn the clean check already flagged and kept is the clean check's
decision; this check judges what the mix did). A failing scene raises MixIntelligibilityError
with the reason; the build records it as a skipped scene.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from casu_dataset.core import atomic
from casu_dataset.core.audio_io import resample
from casu_dataset.core.errors import RunError
from casu_dataset.core.loudness import exact_sum, kweight

# Measured on CASU-mini (113 scenes, 237 turns, seed 0): turns no event overlaps sit at 8.5 dB
# and up (median 13.6); the 19 overlapped turns at -0.8 to 11 dB. Below 3 dB speech is under
# twice the power of the rest: the two real maskings (-0.8 dB duck, 2.5 dB jet: mixture WER 0.70
# and 0.86, clean 0) fall there, and above it no turn Whisper reads fine in the clean is lost
# by the ratio alone (3.2-5.3 dB turns: mixture WER 0.0-0.45, left to the Whisper test).
DEFAULT_MIN_RATIO_DB = 3.0
# A turn with no overlap is transcribed only when its ratio is below this (a loud passage of
# the bed). Not lower than needed: without overlap Whisper tiny.en already loses 0.09 WER on
# average to the bed (0.07 clean -> 0.16 mixture), so transcribing every turn adds cost and
# noise, not findings.
DEFAULT_WHISPER_BELOW_DB = 6.0
RATIO_LIMIT_DB = 120.0  # reported instead of +-inf for a silent stem
WHISPER_SR = 16000


class MixIntelligibilityError(RunError, ValueError):
    """A scene whose speech is not intelligible in the mixture."""


@dataclass(frozen=True)
class MixCheckConfig:
    min_ratio_db: float = DEFAULT_MIN_RATIO_DB
    whisper_below_db: float = DEFAULT_WHISPER_BELOW_DB


def _span(turn: dict, sr: int, n: int) -> tuple[int, int]:
    lo = int(turn["onset_samples"]) if "onset_samples" in turn else int(round(turn["onset"] * sr))
    hi = lo + int(round((turn["offset"] - turn["onset"]) * sr))
    return max(0, min(lo, n)), max(0, min(hi, n))


def speech_to_rest_db(stems: dict[str, np.ndarray], lo: int, hi: int, sr: int) -> float:
    """K-weighted speech power over background+events power in [lo, hi), dB."""
    if hi <= lo:
        raise ValueError(f"mix check: empty turn span [{lo}, {hi})")
    speech = stems["speech"][lo:hi]
    rest = stems["background"][lo:hi] + stems["events"][lo:hi]
    # Exact sums and scalar log10: the same dB on every CPU (see loudness.gated_lufs).
    ps = exact_sum(np.square(kweight(speech, sr), dtype=np.float64)) / (hi - lo)
    pr = exact_sum(np.square(kweight(rest, sr), dtype=np.float64)) / (hi - lo)
    if ps <= 0.0 or pr <= 0.0:
        return -RATIO_LIMIT_DB if ps <= 0.0 else RATIO_LIMIT_DB
    return min(RATIO_LIMIT_DB, max(-RATIO_LIMIT_DB, 10.0 * math.log10(ps / pr)))


def overlaps(annotation: dict) -> list[list[str]]:
    """Per turn, what else sounds inside its span: event ids and 'turn N' for overlapping turns."""
    plan = annotation["plan"]
    ev_ids = [e.get("id", f"event {j}") for j, e in enumerate(annotation.get("events", []))]
    out = []
    for i, t in enumerate(plan["turns"]):
        hits = [
            ev_ids[j]
            for j, e in enumerate(plan["events"])
            if e["onset"] < t["offset"] and e["offset"] > t["onset"]
        ]
        hits += [
            f"turn {k}"
            for k, u in enumerate(plan["turns"])
            if k != i and u["onset"] < t["offset"] and u["offset"] > t["onset"]
        ]
        out.append(hits)
    return out


class TranscriptCache:
    """Mixture transcripts keyed by sha256(segment samples, rate) + text + model id, in memory
    and (with a folder) on disk, so an identical segment is never transcribed twice, across
    scenes, worker processes and rebuilds."""

    def __init__(self, folder: str | Path | None = None):
        self.dir = Path(folder) if folder else None
        self._mem: dict[str, str] = {}
        self.hits = self.misses = 0

    @staticmethod
    def key(segment: np.ndarray, sr: int, text: str, model_id: str) -> str:
        h = hashlib.sha256(np.ascontiguousarray(segment, dtype=np.float32).tobytes())
        h.update(json.dumps([sr, text, model_id]).encode())
        return h.hexdigest()

    def get(self, key: str) -> str | None:
        if key in self._mem:
            return self._mem[key]
        if self.dir is not None:
            p = self.dir / key[:2] / f"{key}.json"
            try:
                hyp = json.loads(p.read_text())["transcript"]
            except (OSError, ValueError, KeyError):
                return None  # absent or a corrupt entry: transcribe again
            self._mem[key] = hyp
            return hyp
        return None

    def put(self, key: str, transcript: str) -> None:
        self._mem[key] = transcript
        if self.dir is not None:
            # atomic: a killed build never leaves a half-written entry
            atomic.write_text(self.dir / key[:2] / f"{key}.json", json.dumps({"transcript": transcript}))

    def transcribe(self, checker, segment16k: np.ndarray, text: str) -> str:
        k = self.key(segment16k, WHISPER_SR, text, checker.model_id)
        hyp = self.get(k)
        if hyp is None:
            self.misses += 1
            hyp = checker.transcribe(segment16k)
            self.put(k, hyp)
        else:
            self.hits += 1
        return hyp


def check_mix(
    result,
    checker=None,
    max_wer: float = 0.5,
    config: MixCheckConfig | None = None,
    cache: TranscriptCache | None = None,
) -> dict:
    """Check a MixResult; returns the record for annotation['extra']['mix_intelligibility'],
    or raises MixIntelligibilityError naming each failing turn."""
    from casu_dataset.speech.intelligibility import wer

    cfg = config or MixCheckConfig()
    cache = cache if cache is not None else TranscriptCache()
    ann = result.annotation
    sr, n = int(ann["sample_rate"]), int(result.mixture.shape[0])
    texts = [t["text"] for t in ann["turns"]]
    clean = [c.get("wer") for c in (ann.get("extra", {}).get("speech", {}).get("intelligibility") or [])]
    over = overlaps(ann)
    turns, failures = [], []
    for i, t in enumerate(ann["plan"]["turns"]):
        lo, hi = _span(t, sr, n)
        ratio = speech_to_rest_db(result.stems, lo, hi, sr)
        checked = checker is not None and (
            bool(over[i]) or ratio < cfg.whisper_below_db or ratio < cfg.min_ratio_db
        )
        w = None
        if checked:
            seg = result.mixture[lo:hi]
            seg = seg if sr == WHISPER_SR else resample(seg, sr, WHISPER_SR)
            w = wer(texts[i], cache.transcribe(checker, seg, texts[i]))
        turns.append(
            {
                "index": i,
                "ratio_db": round(ratio, 2),
                "wer": None if w is None else round(w, 4),
                "checked": checked,
                "overlapped_by": over[i],
            }
        )
        clean_w = clean[i] if i < len(clean) and clean[i] is not None else 0.0
        low_ratio = ratio < cfg.min_ratio_db
        high_wer = w is not None and w > max_wer and w > clean_w
        if low_ratio or high_wer:
            why = [f"speech-to-rest {ratio:.1f} dB" + (f" < {cfg.min_ratio_db:g} dB" if low_ratio else "")]
            if w is not None:
                why.append(
                    f"mixture WER {w:.2f}" + (f" > {max_wer:g} (clean {clean_w:.2f})" if high_wer else "")
                )
            if over[i]:
                why.append(f"overlapped by {', '.join(over[i])}")
            failures.append(f"turn {i}: " + "; ".join(why))
    if failures:
        raise MixIntelligibilityError(
            f"scene {ann['scene_id']}: speech not intelligible in the mix: " + " | ".join(failures)
        )
    return {
        "turns": turns,
        "max_wer": max_wer,
        "min_ratio_db": cfg.min_ratio_db,
        "whisper_below_db": cfg.whisper_below_db,
        "model": getattr(checker, "model_id", None),
    }


@functools.lru_cache(maxsize=8)
def transcript_cache(folder: str | Path) -> TranscriptCache:
    """One cache per folder and process, shared by every scene a builder makes."""
    return TranscriptCache(folder)
