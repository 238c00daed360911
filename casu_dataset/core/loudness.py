"""Loudness (ITU-R BS.1770-4 via pyloudnorm) and a fast path for mixing.

`measure_lufs` is pyloudnorm's integrated loudness. The mixer also needs the loudness of
each 30 s stem for every scene; the K-weighting filter is linear and time-invariant, so the
K-weighted stem equals the sum of the time-shifted K-weighted clips. `KWeighting` filters a
clip once (cached by the caller) and `gated_lufs` applies pyloudnorm's exact gating with
vectorised block energies. Tests check it against pyloudnorm on the stems.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import pyloudnorm as pyln
import scipy.signal

BLOCK_S = 0.400
OVERLAP = 0.75
ABS_GATE = -70.0
SILENCE_LUFS = -120.0  # reported for digital silence instead of -inf


@functools.lru_cache(maxsize=8)
def meter(sr: int) -> pyln.Meter:
    return pyln.Meter(sr)


def _fit_block(x: np.ndarray, sr: int) -> np.ndarray:
    # pyloudnorm needs more than one 400 ms block; a short clip is tiled so its loudness
    # is that of the sound itself, not diluted by padding silence.
    need = int(BLOCK_S * sr) + 1
    if x.shape[0] >= need:
        return x
    return np.tile(x, int(np.ceil(need / x.shape[0])))[:need]


def measure_lufs(x: np.ndarray, sr: int) -> float:
    """Integrated loudness in LUFS (pyloudnorm); SILENCE_LUFS for silence."""
    x = _fit_block(np.asarray(x, dtype=np.float64), sr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = meter(sr).integrated_loudness(x)
    return float(v) if np.isfinite(v) else SILENCE_LUFS


@functools.lru_cache(maxsize=8)
def _sos(sr: int) -> np.ndarray:
    """pyloudnorm's two K-weighting stages as one second-order-section cascade."""
    stages = [meter(sr)._filters[k] for k in ("high_shelf", "high_pass")]
    sos = np.array([np.concatenate([f.b / f.a[0], f.a / f.a[0]]) for f in stages])
    sos[0, :3] *= stages[0].passband_gain * stages[1].passband_gain
    return sos


def kweight(x: np.ndarray, sr: int) -> np.ndarray:
    return scipy.signal.sosfilt(_sos(sr), np.asarray(x, dtype=np.float64)).astype(np.float32)


def gated_lufs(kw: np.ndarray, sr: int, support: list[tuple[int, int]] | None = None) -> float:
    """pyloudnorm's gating (absolute -70, relative -10 LU) over an already K-weighted signal.

    Portable to the last bit: block energies come from one float64 running sum (squares of
    float32 samples are exact in float64, and `cumsum` adds strictly in order, unlike a
    vectorised dot product whose order follows the CPU's vector width), the gates are compared
    as energies (no vectorised log10, whose AVX-512 loop differs from the scalar one in the
    last bit) and the means are exact sums (math.fsum).

    `support`: sorted, disjoint [start, end) spans outside which `kw` is exactly zero (a layer's
    placed clips). The running sum is then computed inside them only: adding 0.0 leaves a float64
    sum unchanged, so the bits are those of the sum over every sample, at a fraction of the cost
    for a sparse layer."""
    n = kw.shape[0]
    block = int(BLOCK_S * sr)
    step = BLOCK_S * (1 - OVERLAP)  # seconds
    if n <= block:
        kw = _fit_block(kw, sr)
        n = kw.shape[0]
        support = None
    num_blocks = int(np.round((n / sr - BLOCK_S) / step)) + 1
    j = np.arange(num_blocks)
    # Same float expression as pyloudnorm, so block bounds match it sample for sample.
    lo = (BLOCK_S * (j * (1 - OVERLAP)) * sr).astype(np.int64)
    hi = np.minimum(lo + block, n)
    csum = _running_sums(kw, np.concatenate([lo, hi]), [(0, n)] if support is None else support)
    z = (csum[num_blocks:] - csum[:num_blocks]) / block
    # lj = -0.691 + 10 log10(z) >= -70  <=>  z >= 10 ** ((-70 + 0.691) / 10)
    keep = z >= _ABS_GATE_ENERGY
    if not keep.any():
        return SILENCE_LUFS
    # lj > (loudness of the kept blocks) - 10 LU  <=>  z > mean(kept z) / 10
    mean = math.fsum(z[keep]) / int(keep.sum())
    keep &= z > mean / 10.0
    if not keep.any():
        return SILENCE_LUFS
    return -0.691 + 10.0 * math.log10(math.fsum(z[keep]) / int(keep.sum()))


def _running_sums(x: np.ndarray, at: np.ndarray, spans: list[tuple[int, int]]) -> np.ndarray:
    """sum(float64(x[:k]) ** 2), added strictly in order, for each k of `at`; x is zero outside
    `spans` (sorted, disjoint), which are the only samples read."""
    out = np.zeros(at.shape[0], dtype=np.float64)
    carry, prev_end = 0.0, 0
    for s, e in spans:
        if e <= s:
            continue
        if s < prev_end:
            raise ValueError(f"loudness: support spans overlap or are unsorted at [{s}, {e})")
        # seg[i] is the running sum before sample s + i: the carry, then this span's squares.
        seg = np.empty(e - s + 1, dtype=np.float64)
        seg[0] = carry
        np.square(x[s:e], dtype=np.float64, out=seg[1:])
        np.cumsum(seg, out=seg)
        inside = (at >= s) & (at <= e)
        out[inside] = seg[at[inside] - s]
        out[at > e] = seg[-1]
        carry, prev_end = float(seg[-1]), e
    return out


def merged_spans(spans) -> list[tuple[int, int]]:
    """Sorted, disjoint [start, end) spans covering the given ones (empty ones dropped)."""
    out: list[list[int]] = []
    for s, e in sorted((int(s), int(e)) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


_ABS_GATE_ENERGY = 10.0 ** ((ABS_GATE + 0.691) / 10.0)


def db_to_gain(db: float) -> float:
    return float(10.0 ** (db / 20.0))
