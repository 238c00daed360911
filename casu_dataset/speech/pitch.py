"""Median fundamental frequency of speech (YIN, de Cheveigné & Kawahara 2002), vectorised.

Used to check that two voices of a conversation are apart in pitch, in semitones.
"""

from __future__ import annotations

import numpy as np
import soxr

SR = 16000


def median_f0(
    audio: np.ndarray, sr: int, fmin: float = 60.0, fmax: float = 500.0, threshold: float = 0.15
) -> float:
    """Median f0 in Hz over voiced frames; nan when nothing is voiced."""
    x = soxr.resample(audio.astype(np.float32), sr, SR) if sr != SR else audio.astype(np.float32)
    frame, hop = 1024, 256
    tau_min, tau_max = int(SR / fmax), int(SR / fmin)
    if x.shape[0] < frame + tau_max:
        return float("nan")
    n = (x.shape[0] - frame - tau_max) // hop
    idx = np.arange(n)[:, None] * hop
    energy = np.sqrt(np.mean(x[idx + np.arange(frame)] ** 2, axis=1))
    voiced_candidates = energy > 0.1 * energy.max()
    frames = x[idx + np.arange(frame + tau_max)][voiced_candidates]
    if frames.shape[0] == 0:
        return float("nan")
    # Difference function via FFT autocorrelation: d(tau) = r0 + r_tau(shifted) - 2 r(tau).
    w = frame
    spec = np.fft.rfft(frames, n=2 * (w + tau_max))
    ref = np.fft.rfft(frames[:, :w], n=2 * (w + tau_max))
    corr = np.fft.irfft(spec * np.conj(ref))[:, : tau_max + 1]
    sq = np.cumsum(np.concatenate([np.zeros((frames.shape[0], 1)), frames**2], axis=1), axis=1)
    energy_shift = sq[:, w : w + tau_max + 1] - sq[:, : tau_max + 1]
    d = sq[:, w : w + 1] + energy_shift - 2 * corr
    d[:, 0] = 0
    cmnd = np.ones_like(d)
    cs = np.cumsum(d[:, 1:], axis=1)
    cmnd[:, 1:] = d[:, 1:] * np.arange(1, d.shape[1]) / np.maximum(cs, 1e-12)
    f0s = []
    for row in cmnd:
        below = np.flatnonzero(row[tau_min:] < threshold)
        if below.size == 0:
            continue
        t = tau_min + below[0]
        while t + 1 < row.shape[0] and row[t + 1] < row[t]:
            t += 1
        if 0 < t < row.shape[0] - 1:  # parabolic interpolation
            a, b, c = row[t - 1], row[t], row[t + 1]
            den = a - 2 * b + c
            t = t + 0.5 * (a - c) / den if den else t
        f0s.append(SR / t)
    return float(np.median(f0s)) if f0s else float("nan")


def semitones(f_a: float, f_b: float) -> float:
    return float(abs(12.0 * np.log2(f_a / f_b)))
