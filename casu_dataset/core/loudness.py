"""Loudness (ITU-R BS.1770-4, pyloudnorm's) and a fast path for mixing.

`measure_lufs` is pyloudnorm's integrated loudness (`integrated_loudness`: its algorithm, ported).
The mixer also needs the loudness of each 30 s stem for every scene; the K-weighting filter is
linear and time-invariant, so the K-weighted stem equals the sum of the time-shifted K-weighted
clips. `kweight` filters a clip once (cached by the caller) and `gated_lufs` applies pyloudnorm's
exact gating to block energies summed exactly in integers, so they are vectorised and the same on
every CPU; `RunningEnergy` serves any window of one clip (a bed cut differently in each scene).
Tests check both against pyloudnorm."""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from casu_dataset.core.iir import lfilter, sosfilt

# pyloudnorm 0.2.0's integrated loudness and K-weighting (MIT License, (c) 2018 Christian Steinmetz),
# ported with scipy's filter loops loaded on their own (core/iir.py): pyloudnorm imports scipy.signal,
# ~0.55 s in every process that mixes. Its algorithm is kept expression for expression, so the
# values are pyloudnorm's to the last bit (tests/test_loudness.py compares them with the pinned
# pyloudnorm, which stays the reference, on real recordings).
PYLOUDNORM_VERSION = "0.2"  # what the mix annotations record (pyloudnorm 0.2.0 has no __version__)

BLOCK_S = 0.400
OVERLAP = 0.75
ABS_GATE = -70.0
SILENCE_LUFS = -120.0  # reported for digital silence instead of -inf


@dataclass(frozen=True)
class Biquad:
    """One pyloudnorm IIRfilter stage: b and a normalised by a0, and its passband gain."""

    b: np.ndarray
    a: np.ndarray
    passband_gain: float = 1.0

    def apply(self, data: np.ndarray) -> np.ndarray:
        return self.passband_gain * lfilter(self.b, self.a, data)  # IIRfilter.apply_filter


def _biquad(G: float, Q: float, fc: float, rate: int, filter_type: str) -> Biquad:
    """pyloudnorm's IIRfilter(G, Q, fc, rate, filter_type).generate_coefficients (RBJ cookbook),
    for the two stages of its K-weighting."""
    A = 10 ** (G / 40.0)
    w0 = 2.0 * np.pi * (fc / rate)
    alpha = np.sin(w0) / (2.0 * Q)
    if filter_type == "high_shelf":
        b0 = A * ((A + 1) + (A - 1) * np.cos(w0) + 2 * np.sqrt(A) * alpha)
        b1 = -2 * A * ((A - 1) + (A + 1) * np.cos(w0))
        b2 = A * ((A + 1) + (A - 1) * np.cos(w0) - 2 * np.sqrt(A) * alpha)
        a0 = (A + 1) - (A - 1) * np.cos(w0) + 2 * np.sqrt(A) * alpha
        a1 = 2 * ((A - 1) - (A + 1) * np.cos(w0))
        a2 = (A + 1) - (A - 1) * np.cos(w0) - 2 * np.sqrt(A) * alpha
    elif filter_type == "high_pass":
        b0 = (1 + np.cos(w0)) / 2
        b1 = -(1 + np.cos(w0))
        b2 = (1 + np.cos(w0)) / 2
        a0 = 1 + alpha
        a1 = -2 * np.cos(w0)
        a2 = 1 - alpha
    else:
        raise ValueError(f"loudness: no {filter_type!r} stage in the K-weighting")
    return Biquad(np.array([b0, b1, b2]) / a0, np.array([a0, a1, a2]) / a0)


@functools.lru_cache(maxsize=8)
def k_weighting(sr: int) -> tuple[Biquad, Biquad]:
    """pyloudnorm's Meter(sr) "K-weighting" stages, in its order: high shelf, then high pass."""
    return (
        _biquad(4.0, 1 / np.sqrt(2), 1500.0, sr, "high_shelf"),
        _biquad(0.0, 0.5, 38.0, sr, "high_pass"),
    )


def integrated_loudness(data: np.ndarray, rate: int) -> float:
    """pyloudnorm.Meter(rate).integrated_loudness(data) (BS.1770-4 gating, 400 ms blocks, 75%
    overlap), the same operations in the same order. data: (samples,) or (samples, channels)."""
    input_data = data.copy()
    if not np.issubdtype(input_data.dtype, np.floating):
        raise ValueError("Data must be floating point.")
    if input_data.ndim == 2 and input_data.shape[1] > 5:
        raise ValueError("Audio must have five channels or less.")
    if input_data.shape[0] < BLOCK_S * rate:
        raise ValueError("Audio must have length greater than the block size.")
    if input_data.ndim == 1:
        input_data = np.reshape(input_data, (input_data.shape[0], 1))
    num_channels, num_samples = input_data.shape[1], input_data.shape[0]
    for stage in k_weighting(rate):
        for ch in range(num_channels):
            input_data[:, ch] = stage.apply(input_data[:, ch])
    G = [1.0, 1.0, 1.0, 1.41, 1.41]  # channel gains
    T_g, step = BLOCK_S, 1.0 - OVERLAP
    T = num_samples / rate
    num_blocks = int(np.round((T - T_g) / (T_g * step))) + 1
    j_range = np.arange(0, num_blocks)
    z = np.zeros(shape=(num_channels, num_blocks))
    for i in range(num_channels):
        for j in j_range:
            lo = int(T_g * (j * step) * rate)
            hi = int(T_g * (j * step + 1) * rate)
            z[i, j] = (1.0 / (T_g * rate)) * np.sum(np.square(input_data[lo:hi, i]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        lj = [
            -0.691 + 10.0 * np.log10(np.sum([G[i] * z[i, j] for i in range(num_channels)])) for j in j_range
        ]
    J_g = [j for j, l_j in enumerate(lj) if l_j >= ABS_GATE]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        z_avg_gated = [np.mean([z[i, j] for j in J_g]) for i in range(num_channels)]
    gamma_r = -0.691 + 10.0 * np.log10(np.sum([G[i] * z_avg_gated[i] for i in range(num_channels)])) - 10.0
    J_g = [j for j, l_j in enumerate(lj) if (l_j > gamma_r and l_j > ABS_GATE)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        z_avg_gated = np.nan_to_num(np.array([np.mean([z[i, j] for j in J_g]) for i in range(num_channels)]))
    with np.errstate(divide="ignore"):
        return -0.691 + 10.0 * np.log10(np.sum([G[i] * z_avg_gated[i] for i in range(num_channels)]))


def _fit_block(x: np.ndarray, sr: int) -> np.ndarray:
    # pyloudnorm needs more than one 400 ms block; a short clip is tiled so its loudness
    # is that of the sound itself, not diluted by padding silence.
    need = int(BLOCK_S * sr) + 1
    if x.shape[0] >= need:
        return x
    return np.tile(x, int(np.ceil(need / x.shape[0])))[:need]


def measure_lufs(x: np.ndarray, sr: int) -> float:
    """Integrated loudness in LUFS (pyloudnorm's); SILENCE_LUFS for silence."""
    x = _fit_block(np.asarray(x, dtype=np.float64), sr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = integrated_loudness(x, sr)
    return float(v) if np.isfinite(v) else SILENCE_LUFS


@functools.lru_cache(maxsize=8)
def _sos(sr: int) -> np.ndarray:
    """pyloudnorm's two K-weighting stages as one second-order-section cascade."""
    stages = k_weighting(sr)
    sos = np.array([np.concatenate([f.b / f.a[0], f.a / f.a[0]]) for f in stages])
    sos[0, :3] *= stages[0].passband_gain * stages[1].passband_gain
    return sos


def kweight(x: np.ndarray, sr: int) -> np.ndarray:
    return sosfilt(_sos(sr), np.asarray(x, dtype=np.float64)).astype(np.float32)


def gated_lufs(kw: np.ndarray, sr: int, support: list[tuple[int, int]] | None = None) -> float:
    """pyloudnorm's gating (absolute -70, relative -10 LU) over an already K-weighted signal.

    Portable to the last bit: the block energies are exact integer sums (see `_scale`), the
    gates are compared as energies (no vectorised log10, whose AVX-512 loop differs from the
    scalar one in the last bit) and the means are exact sums (exact_sum: math.fsum's value).

    `support`: sorted, disjoint [start, end) spans outside which `kw` is exactly zero (a layer's
    placed clips); only those samples are read, and the result is the same to the last bit."""
    n = kw.shape[0]
    if n <= int(BLOCK_S * sr):
        kw = _fit_block(kw, sr)
        n, support = kw.shape[0], None
    spans = _checked_spans([(0, n)] if support is None else support)
    peak = max((peak_abs(kw[s:e]) for s, e in spans), default=0.0)
    scale = _scale(peak, n)
    if scale is None:
        return SILENCE_LUFS
    lo, hi, bounds = _blocks(n, sr)
    # Sums between consecutive block bounds (<= one 100 ms hop each), then running sums of those.
    seg = np.zeros(bounds.shape[0], dtype=np.int64)  # seg[k]: samples [bounds[k], bounds[k + 1])
    for s, e in spans:
        k0 = int(np.searchsorted(bounds, s, "right")) - 1
        k1 = int(np.searchsorted(bounds, e, "left"))
        cuts = np.concatenate(([s], bounds[k0 + 1 : k1])) - s
        seg[k0:k1] += np.add.reduceat(_squares(kw[s:e], scale), cuts).astype(np.int64)
    at = np.zeros(bounds.shape[0], dtype=np.int64)
    np.cumsum(seg[:-1], out=at[1:])
    return _gate(at[np.searchsorted(bounds, hi)] - at[np.searchsorted(bounds, lo)], scale, sr)


class RunningEnergy:
    """A whole clip's running sums of quantised squares, for the loudness of any window of it
    (a bed cut at a different offset in each scene) without reading its samples again. The
    quantisation scale is the clip's, so a window's value can differ from `gated_lufs` of the
    window by ~1e-9 LU; it is the same on every CPU."""

    def __init__(self, x: np.ndarray):
        n = x.shape[0]
        self.n = n
        self.scale = _scale(peak_abs(x), n)
        self.csum = np.zeros(n + 1, dtype=np.int64)
        if self.scale is not None:
            np.cumsum(_squares(x, self.scale).astype(np.int64), out=self.csum[1:])

    def gated_lufs(self, sr: int, start: int, n: int) -> float:
        if start < 0 or start + n > self.n or n <= int(BLOCK_S * sr):
            raise ValueError(f"loudness: window [{start}, {start + n}) of a {self.n}-sample clip")
        if self.scale is None:
            return SILENCE_LUFS
        lo, hi, _ = _blocks(n, sr)
        return _gate(self.csum[start + hi] - self.csum[start + lo], self.scale, sr)


# Quantised samples have |q| <= 2**SCALE_BITS, so a square is an integer < 2**40 and a sum of up
# to 8192 of them (a 400 ms block up to 20 kHz) stays below 2**53: float64 adds such integers
# exactly, in whatever order numpy's vector loops use on this CPU, and the running sums are int64.
SCALE_BITS = 20


def _scale(peak: float, n: int) -> float | None:
    """The power of two that maps the peak just under 2**SCALE_BITS (fewer bits for a signal so
    long that its total could overflow int64); None for digital silence. Relative to the peak a
    sample keeps ~20 significant bits, far finer than the 0.001 LU agreement with pyloudnorm."""
    if peak == 0.0:
        return None
    bits = min(SCALE_BITS, (62 - (n + 1).bit_length()) // 2)
    return math.ldexp(1.0, bits - math.frexp(peak)[1])


def _squares(x: np.ndarray, scale: float) -> np.ndarray:
    """rint(x * scale) ** 2 as exact float64 integers. x * scale is exact in float64 (a power of
    two), and rint rounds half to even on every CPU."""
    if scale >= 1.0:
        # In float32 (half the memory traffic): scaling up by a power of two is exact there too.
        q32 = x * np.float32(scale)
        np.rint(q32, out=q32)
        return np.square(q32, dtype=np.float64)
    q = np.asarray(x, dtype=np.float64) * scale
    np.rint(q, out=q)
    return np.square(q, out=q)


def peak_abs(x: np.ndarray) -> float:
    """max |x| (0.0 for no samples), without an |x| temporary."""
    return max(float(x.max()), -float(x.min())) if x.size else 0.0


@functools.lru_cache(maxsize=64)
def _blocks(n: int, sr: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[lo, hi) of every 400 ms gating block (75% overlap) of an n-sample signal, and every
    bound (0, n, lo and hi) sorted once. Cached: a build's scenes share a few lengths."""
    block = int(BLOCK_S * sr)
    step = BLOCK_S * (1 - OVERLAP)  # seconds
    num_blocks = int(np.round((n / sr - BLOCK_S) / step)) + 1
    j = np.arange(num_blocks)
    # Same float expression as pyloudnorm, so block bounds match it sample for sample.
    lo = (BLOCK_S * (j * (1 - OVERLAP)) * sr).astype(np.int64)
    hi = np.minimum(lo + block, n)
    bounds = np.unique(np.concatenate(([0, n], lo, hi)))
    for a in (lo, hi, bounds):
        a.flags.writeable = False
    return lo, hi, bounds


def _checked_spans(spans) -> list[tuple[int, int]]:
    out, prev_end = [], 0
    for s, e in spans:
        if e <= s:
            continue
        if s < prev_end:
            raise ValueError(f"loudness: support spans overlap or are unsorted at [{s}, {e})")
        out.append((int(s), int(e)))
        prev_end = e
    return out


def exact_sum(values) -> float:
    """math.fsum(values) for a float64 array, bit for bit (both are the correctly rounded sum), in
    numpy: several times faster on a turn's 10**5 squares. From its bits, each value is
    +-m * 2**(E - 1075), m an integer below 2**53 and E its biased exponent; m splits into
    2**26 * hi + lo, and the his and los of each exponent are summed as floats (np.bincount), exact
    while a sum stays below 2**53 (2**26 values at most); Python ints then join the exponents
    exactly, and int / 2**k rounds correctly. Every step is exact, so the value is the same on every
    CPU, whatever order numpy adds in. Non-finite values, more than 2**26 of them, and a
    sum of zero (fsum keeps -0.0) or beyond the largest float go to math.fsum."""
    a = np.ascontiguousarray(values, dtype=np.float64).ravel()
    if a.size == 0 or a.size > 1 << 26 or not np.isfinite(a).all():
        return math.fsum(a)
    bits = a.view(np.int64)
    exp = (bits >> 52) & 0x7FF
    mant = bits & ((1 << 52) - 1)
    mant |= (exp > 0).astype(np.int64) << 52  # the implicit bit of a normal number
    np.maximum(exp, 1, out=exp)  # a subnormal's exponent is the smallest normal one's
    mant = np.where(bits < 0, -mant, mant)
    hi = np.bincount(exp, weights=(mant >> 26).astype(np.float64))
    lo = np.bincount(exp, weights=(mant & ((1 << 26) - 1)).astype(np.float64))
    total = 0
    for k in np.flatnonzero((hi != 0) | (lo != 0)):
        total += ((int(hi[k]) << 26) + int(lo[k])) << int(k)
    if total == 0:
        return math.fsum(a)
    try:
        return total / (1 << 1075)  # an exact int, one correctly rounded division
    except OverflowError:  # beyond the largest float: as fsum has it
        return math.fsum(a)


def _gate(sums: np.ndarray, scale: float, sr: int) -> float:
    """Integrated loudness from the blocks' integer sums of quantised squares."""
    z = sums.astype(np.float64) / (scale * scale) / int(BLOCK_S * sr)  # the blocks' mean squares
    # lj = -0.691 + 10 log10(z) >= -70  <=>  z >= 10 ** ((-70 + 0.691) / 10)
    keep = z >= _ABS_GATE_ENERGY
    if not keep.any():
        return SILENCE_LUFS
    # lj > (loudness of the kept blocks) - 10 LU  <=>  z > mean(kept z) / 10
    mean = exact_sum(z[keep]) / int(keep.sum())
    keep &= z > mean / 10.0
    if not keep.any():
        return SILENCE_LUFS
    return -0.691 + 10.0 * math.log10(exact_sum(z[keep]) / int(keep.sum()))


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
