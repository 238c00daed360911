"""Bootstrap intervals, shared by every metric: lm-eval's `bootstrap_iters` for the run in
progress, the percentile interval and a mean with its interval."""

from __future__ import annotations

import contextvars

import numpy as np

BOOTSTRAP = 1000
# lm-eval's bootstrap_iters for the run in progress (simple_evaluate sets it): resamples of every
# interval; 0 computes none (the intervals are None and lm-eval's stderr "N/A")
BOOTSTRAP_ITERS: contextvars.ContextVar[int] = contextvars.ContextVar("bootstrap_iters", default=BOOTSTRAP)


def bootstrap_ci(values, n_boot: int | None = None, seed: int = 0, stat=np.mean, level: float = 0.95):
    """Percentile bootstrap interval of `stat` over per-sample values; None for no samples (or
    bootstrap_iters=0)."""
    n_boot = BOOTSTRAP_ITERS.get() if n_boot is None else n_boot
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or n_boot == 0:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, v.size, size=(n_boot, v.size))
    stats = stat(v[idx], axis=1) if stat is np.mean else np.array([stat(v[i]) for i in idx])
    lo, hi = np.percentile(stats, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return [float(lo), float(hi)]


def mean_with_ci(values, seed: int = 0) -> dict:
    v = [float(x) for x in values]
    return {"value": float(np.mean(v)) if v else None, "ci95": bootstrap_ci(v, seed=seed), "n": len(v)}
