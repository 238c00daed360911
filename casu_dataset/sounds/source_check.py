"""Source validation: which audio files may feed a mix, with the reason when one may not.

One set of rules serves the catalog (when a catalog is loaded, or when retrieval first uses a
clip) and the mixer (`ClipCache.get`), so a clip the catalog accepts is one the mixer mixes:

- readable, non-empty, finite samples (audio_io raises for these);
- the DC offset (the mean) is removed before anything is measured or mixed;
- not silent: integrated loudness after DC removal >= MIN_LUFS (below it, normalisation
  would apply gains of 40-100 dB to hiss or digital silence);
- long enough: MIN_EVENT_S for events and speech, MIN_BED_S for beds (a few-sample bed
  loops into a tone, a few-sample click is not an event);
- the duration is measured from the decoded samples, never taken from metadata.

Measurements (not verdicts) are cached on disk keyed on the file's sha256, so thresholds can
change without a re-scan; a (path, size, mtime) memo maps a file to its hash so a warm load
reads no audio at all.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.audio_io import (
    SAMPLE_RATE,
    AudioError,
    file_sha256,
    read_audio,
    resample,
)
from casu_dataset.core.loudness import SILENCE_LUFS, measure_lufs

MIN_EVENT_S = 0.1
MIN_BED_S = 1.0
MIN_LUFS = -60.0
MEASURE_VERSION = 1  # bump when `measure_array` changes what it records


def remove_dc(x: np.ndarray) -> tuple[np.ndarray, float]:
    dc = float(np.mean(x, dtype=np.float64))
    return (x - np.float32(dc)).astype(np.float32, copy=False), dc


def min_length_s(kind: str | None) -> float:
    return MIN_BED_S if kind == "background" else MIN_EVENT_S


def verdict(m: dict, kind: str | None = None) -> str | None:
    """Why a measured source is unusable ("category: detail"), or None when it is fine."""
    if m.get("error"):
        return m["error"]
    dur, need = m["duration"], min_length_s(kind)
    if dur < need:
        return f"too short: {dur:.4f} s ({m['frames']} samples) < {need} s minimum for {kind or 'a source'}"
    if m["lufs"] < MIN_LUFS:
        return f"silent: {m['lufs']:.1f} LUFS after DC removal < {MIN_LUFS} LUFS"
    return None


def clean(x: np.ndarray, file_sr: int, sr: int = SAMPLE_RATE) -> tuple[np.ndarray, float]:
    """DC removed at the file rate, then resampled: resampling a large offset first would
    leave ringing at the clip edges (the resampler sees a step from zero)."""
    x, dc = remove_dc(x)
    return resample(x, file_sr, sr), dc


def _measured(x: np.ndarray, file_sr: int, sr: int) -> tuple[np.ndarray, dict]:
    y, dc = clean(x, file_sr, sr)
    lufs = measure_lufs(y, sr) if y.size else SILENCE_LUFS  # a few samples can resample to none
    return y, {
        "frames": int(x.shape[0]),
        "sample_rate": int(file_sr),
        "duration": x.shape[0] / file_sr,
        "dc": dc,
        "lufs": lufs,
    }


def measure_array(x: np.ndarray, file_sr: int, sr: int = SAMPLE_RATE) -> dict:
    """Measurements of mono float32 samples at the file rate (already checked finite, non-empty)."""
    return _measured(x, file_sr, sr)[1]


def _error_reason(err: AudioError) -> str:
    msg = str(err)
    for key, cat in (
        ("not found", "missing audio file"),
        ("zero-length", "empty"),
        ("NaN", "non-finite"),
        ("corrupt", "unreadable"),
    ):
        if key in msg:
            return f"{cat}: {msg}"
    return f"unreadable: {msg}"


def measure_file(path: str | Path, sr: int = SAMPLE_RATE) -> dict:
    try:
        x, file_sr = read_audio(path)
    except AudioError as err:
        return {"error": _error_reason(err)}
    return measure_array(x, file_sr, sr)


def load_source(path: str | Path, sr: int = SAMPLE_RATE, kind: str | None = None) -> tuple[np.ndarray, float]:
    """The mixer's gate: mono float32 at `sr` with the DC removed, and its loudness; AudioError
    naming the file and the reason for an unusable source."""
    x, file_sr = read_audio(path)
    y, m = _measured(x, file_sr, sr)
    reason = verdict(m, kind)
    if reason:
        raise AudioError(f"{path}: unusable source: {reason}")
    return y, m["lufs"]


class CheckCache:
    """Source measurements on disk: {sha256: measurement} plus a {path: [size, mtime_ns, sha256]} memo."""

    def __init__(self, cache_dir: str | Path | None, scope: str, sr: int = SAMPLE_RATE):
        key = hashlib.sha256(f"{scope}|{sr}|{MEASURE_VERSION}".encode()).hexdigest()[:20]
        self.path = cache_layout.source_checks_dir(cache_dir) / f"{key}.json"
        self.sr = sr
        self.measured = 0  # files decoded by this instance (0 on a warm load)
        self._dirty = False
        try:
            data = json.loads(self.path.read_text())
            self._stat, self._results = data["stat"], data["results"]
        except (OSError, ValueError, KeyError, TypeError):
            self._stat, self._results = {}, {}

    def measure(self, path: str | Path) -> dict:
        p = str(path)
        try:
            st = os.stat(p)
        except OSError:
            return {"error": f"missing audio file: {p}"}
        memo = self._stat.get(p)
        if memo and memo[:2] == [st.st_size, st.st_mtime_ns] and memo[2] in self._results:
            return self._results[memo[2]]
        sha = file_sha256(p)
        m = self._results.get(sha)
        if m is None:
            m = measure_file(p, self.sr)
            if "error" in m:
                m = {"error": m["error"].replace(p, "<file>")}  # content-keyed: not tied to one path
            self._results[sha] = m
            self.measured += 1
        self._stat[p] = [st.st_size, st.st_mtime_ns, sha]
        self._dirty = True
        return m

    def reason(self, path: str | Path, kind: str | None) -> tuple[str | None, dict]:
        m = self.measure(path)
        r = verdict(m, kind)
        return (r.replace("<file>", str(path)) if r else None), m

    def save(self) -> None:
        if not self._dirty:
            return
        try:
            atomic.write_text(
                self.path, json.dumps({"stat": self._stat, "results": self._results}, separators=(",", ":"))
            )
            self._dirty = False
        except OSError:
            pass  # a read-only cache only costs a re-scan next time
