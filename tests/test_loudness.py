"""core/loudness.py's port of pyloudnorm and core/iir.py's scipy filter loops give the pinned
libraries' values to the last bit, on real recordings, without importing scipy.signal."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyloudnorm
import pytest
import scipy.signal

from casu_dataset.core import iir, loudness
from casu_dataset.core.audio_io import read_audio
from casu_dataset.sounds.source_check import clean

RATES = (8000, 16000, 22050, 44100, 48000)


def _bank_clips(clips_dir, n: int) -> list:
    """n recordings spread over the bank (beds and events, each at its own rate)."""
    files = sorted(clips_dir.glob("*.ogg"))
    return files[:: max(1, len(files) // n)][:n]


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("rate", RATES)
def test_k_weighting_coefficients_are_pyloudnorms(rate):
    ours = loudness.k_weighting(rate)
    theirs = list(pyloudnorm.Meter(rate)._filters.values())
    assert len(ours) == len(theirs) == 2
    for o, t in zip(ours, theirs):
        assert _same_bits(o.b, t.b) and _same_bits(o.a, t.a) and o.passband_gain == t.passband_gain


def test_filter_loops_are_scipys_bit_for_bit(clips_dir):
    rng = np.random.default_rng(7)
    sos = loudness._sos(16000)
    b, a = loudness.k_weighting(16000)[0].b, loudness.k_weighting(16000)[0].a
    signals = [rng.standard_normal(n) for n in (1, 2, 3, 1000, 48001)]
    signals += [read_audio(f)[0].astype(np.float64) for f in _bank_clips(clips_dir, 4)]
    for x in signals:
        assert _same_bits(iir.sosfilt(sos, x), scipy.signal.sosfilt(sos, x))
        assert _same_bits(iir.lfilter(b, a, x), scipy.signal.lfilter(b, a, x))
    x32 = signals[-1].astype(np.float32)  # kweight's input as the mixer passes it
    want = scipy.signal.sosfilt(sos, x32.astype(np.float64)).astype(np.float32)
    assert _same_bits(loudness.kweight(x32, 16000), want)


def test_measure_lufs_is_pyloudnorms_on_real_recordings(clips_dir):
    checked = 0
    for f in _bank_clips(clips_dir, 24):
        x, sr = read_audio(f)
        for y, rate in ((x.astype(np.float64), sr), (clean(x, sr)[0], 16000)):
            want = pyloudnorm.Meter(rate).integrated_loudness(np.asarray(y, dtype=np.float64))
            got = loudness.integrated_loudness(np.asarray(y, dtype=np.float64), rate)
            assert got.tobytes() == np.float64(want).tobytes(), (f.name, rate, got, want)
            checked += 1
    # Edge cases pyloudnorm handles: a silent stretch (both gates), digital silence (-inf), two
    # channels (its channel loop), the shortest signal it takes.
    rng = np.random.default_rng(3)
    speechlike = rng.standard_normal(16000 * 5) * np.repeat(rng.random(50) > 0.5, 1600)
    for y, rate in (
        (speechlike, 16000),
        (np.zeros(16000), 16000),
        (rng.standard_normal((44100, 2)) * 0.1, 44100),
        (rng.standard_normal(6401) * 0.3, 16000),
    ):
        want = pyloudnorm.Meter(rate).integrated_loudness(y)
        assert loudness.integrated_loudness(y, rate).tobytes() == np.float64(want).tobytes()
    assert checked == 48


def test_too_short_or_non_float_audio_is_refused_as_pyloudnorm_does():
    with pytest.raises(ValueError, match="greater than the block size"):
        loudness.integrated_loudness(np.zeros(100), 16000)
    with pytest.raises(ValueError, match="floating point"):
        loudness.integrated_loudness(np.zeros(16000, dtype=np.int16), 16000)
    with pytest.raises(ValueError, match="sos must be"):
        iir.sosfilt(np.ones((1, 5)), np.zeros(4))


def test_the_loops_fall_back_to_the_scipy_package_when_its_files_are_laid_out_otherwise(monkeypatch):
    def missing(name):
        raise ImportError(f"scipy.signal.{name}: 0 extension files")

    monkeypatch.setattr(iir, "_load_extension", missing)
    monkeypatch.setattr(iir, "_KERNELS", None)
    x = np.random.default_rng(1).standard_normal(5000)
    sos = loudness._sos(16000)
    assert _same_bits(iir.sosfilt(sos, x), scipy.signal.sosfilt(sos, x))


def test_threads_that_filter_at_once_in_a_fresh_process_all_get_scipys_values():
    """A build's cue threads K-weight their first clips together: the loops load once, without
    an import deadlock, and every thread gets the same bits."""
    code = (
        "import numpy as np\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from casu_dataset.core.loudness import kweight\n"
        "x = np.random.default_rng(0).standard_normal(16000).astype(np.float32)\n"
        "with ThreadPoolExecutor(8) as ex:\n"
        "    out = list(ex.map(lambda _: kweight(x, 16000).tobytes(), range(8)))\n"
        "print(len(set(out)))\n"
    )
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert run.returncode == 0 and run.stdout.strip() == "1", run.stderr[-2000:]


def test_a_process_that_mixes_never_imports_scipy_signal():
    """The worker stack (what every pool worker and Ray actor imports) and a loudness
    measurement load scipy's two filter loops only: no scipy.signal, scipy.stats or pyloudnorm."""
    code = (
        "import sys, numpy as np\n"
        "from casu_dataset.dataset.worker_stack import preload\n"
        "preload()\n"
        "from casu_dataset.core.loudness import measure_lufs, kweight\n"
        "x = np.random.default_rng(0).standard_normal(32000).astype(np.float32)\n"
        "print(measure_lufs(x, 16000), float(kweight(x, 16000)[-1]))\n"
        "print(sorted(m for m in sys.modules if m in ('scipy.signal', 'scipy.stats', 'pyloudnorm')))\n"
        # scipy.signal imported afterwards (a review picture) finds the loops already loaded
        "import scipy.signal\n"
        "from casu_dataset.core.loudness import _sos\n"
        "print(scipy.signal.sosfilt(_sos(16000), x.astype(np.float64)).astype(np.float32).tobytes()"
        " == kweight(x, 16000).tobytes())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lufs, last = map(float, out.splitlines()[0].split())
    x = np.random.default_rng(0).standard_normal(32000).astype(np.float32)
    assert lufs == loudness.measure_lufs(x, 16000) and np.isfinite(last)
    assert out.splitlines()[1] == "[]"
    assert out.splitlines()[2] == "True"
