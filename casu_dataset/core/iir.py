"""scipy's compiled IIR filter loops (sosfilt's and lfilter's), without importing scipy.signal.

Every process that mixes (a one-process build, each pool worker, each Ray actor, the harness's
noise conditions) K-weights audio, and that needs two of scipy.signal's compiled loops. Importing
the package costs ~0.55 s: its array-API layer imports scipy.stats, scipy.interpolate and more.
So the two extension modules are loaded from scipy's installed files on their own (~0.04 s with
scipy's top-level package). The results are scipy.signal.sosfilt's and lfilter's to the last bit,
since the same compiled code runs on the same arrays (tests/test_loudness.py compares them); where
scipy's files are laid out differently, the package itself is imported instead.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from types import ModuleType

import numpy as np


def _load_extension(name: str) -> ModuleType:
    """scipy.signal.<name>, loaded from its file without running scipy/signal/__init__.py."""
    spec = importlib.util.find_spec("scipy")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("scipy is not installed as a package folder")
    folder = Path(next(iter(spec.submodule_search_locations))) / "signal"
    files = sorted(folder.glob(f"{name}.*.so")) + sorted(folder.glob(f"{name}.*.pyd"))
    if len(files) != 1:
        raise ImportError(f"scipy.signal.{name}: {len(files)} extension files in {folder}")
    file_spec = importlib.util.spec_from_file_location(f"scipy.signal.{name}", files[0])
    if file_spec is None or file_spec.loader is None:
        raise ImportError(f"scipy.signal.{name}: no loader for {files[0]}")
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


_LOADING = threading.Lock()
_KERNELS: tuple | None = None


def _load_kernels() -> tuple:
    try:
        return _load_extension("_sosfilt")._sosfilt, _load_extension("_sigtools")._linear_filter
    except (ImportError, OSError, AttributeError, TypeError):
        from scipy.signal import _sigtools
        from scipy.signal._sosfilt import _sosfilt

        return _sosfilt, _sigtools._linear_filter


def kernels() -> tuple:
    """(scipy's _sosfilt loop, its _linear_filter loop), loaded once per process, under a lock: a
    build's cue threads K-weight at once, and two threads importing scipy's modules together can
    each hold a module lock the other waits for (importlib's _DeadlockError)."""
    global _KERNELS
    if _KERNELS is None:
        with _LOADING:
            if _KERNELS is None:
                _KERNELS = _load_kernels()
    return _KERNELS


def sosfilt(sos: np.ndarray, x: np.ndarray) -> np.ndarray:
    """scipy.signal.sosfilt(sos, x) for a 1-D float64 signal and float64 sections (zero initial
    state), as scipy prepares them: x as one C-ordered row, filtered in place."""
    sos = np.ascontiguousarray(sos, dtype=np.float64)
    if sos.ndim != 2 or sos.shape[1] != 6 or not (sos[:, 3] == 1).all():
        raise ValueError(f"sos must be (n_sections, 6) with a0 == 1, got shape {sos.shape}")
    y = np.array(np.asarray(x, dtype=np.float64).reshape(1, -1), dtype=np.float64, order="C")
    kernels()[0](sos, y, np.zeros((1, sos.shape[0], 2), dtype=np.float64))
    return y.reshape(-1)


def lfilter(b: np.ndarray, a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """scipy.signal.lfilter(b, a, x) along the last axis, for an `a` of two or more taps (zero
    initial state): scipy calls this same loop with the same arrays."""
    b, a = np.atleast_1d(b), np.atleast_1d(a)
    if b.ndim != 1 or a.ndim != 1 or a.shape[0] < 2 or b.shape[0] == 0:
        raise ValueError(f"lfilter: b and a must be 1-D with len(a) >= 2, got {b.shape} and {a.shape}")
    return kernels()[1](b, a, np.asarray(x), -1)
