"""Forced instruction-set settings: how one machine proves that the numbers CASU records do not
depend on the CPU they were computed on.

Each library that dispatches kernels by CPU at run time has an override; a setting sets all of
them at once, so a process run under `generic` computes as a pre-AVX2 CPU would, under `avx2`
as an AVX2-only CPU (no AVX-512, no AMX), and `native` as the machine is. The test suite runs
its numerics-sensitive checks under each (tests/test_portability.py) and `make test-isa` runs
the whole suite under each.

- `ATEN_CPU_CAPABILITY` (torch's own vectorised kernels: default / avx2 / avx512),
- `MKL_ENABLE_INSTRUCTIONS` (torch's MKL GEMM; also CTranslate2's MKL backend),
- `ONEDNN_MAX_CPU_ISA` (torch's and CTranslate2's oneDNN kernels, AMX included),
- `CT2_FORCE_CPU_ISA` (CTranslate2, i.e. faster-whisper: GENERIC / AVX2 / AVX512),
- `NPY_DISABLE_CPU_FEATURES` (numpy's dispatched ufunc loops, e.g. its AVX-512 SVML exp/sin),
- `OPENBLAS_CORETYPE` (numpy's and scipy's OpenBLAS kernels).
onnxruntime (Piper's TTS) has no such override: that is why the lock (casu_dataset/dataset/lock.py)
conforms TTS output to the recorded lengths instead of trusting it to be the same.
"""

from __future__ import annotations

import os

_NO_AVX512 = "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"

SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
        "NPY_DISABLE_CPU_FEATURES": _NO_AVX512,
        "OPENBLAS_CORETYPE": "Haswell",
    },
    "generic": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "CT2_FORCE_CPU_ISA": "GENERIC",
        "NPY_DISABLE_CPU_FEATURES": "AVX2 FMA3 " + _NO_AVX512,
        "OPENBLAS_CORETYPE": "Nehalem",
    },
}


def env_for(name: str, base: dict | None = None) -> dict[str, str]:
    """The environment of a process forced to setting `name` (KeyError naming the settings)."""
    if name not in SETTINGS:
        raise KeyError(f"ISA setting {name!r}: expected one of {', '.join(SETTINGS)}")
    env = dict(os.environ if base is None else base)
    for k in {k for s in SETTINGS.values() for k in s}:
        env.pop(k, None)  # a setting says everything it forces; nothing leaks in from the caller
    env.update(SETTINGS[name])
    return env


def describe() -> dict:
    """What this process computes with: the kernels torch and numpy dispatched to, and any
    override in force (recorded in build reports, so drift can be traced to a machine)."""
    import numpy as np

    out: dict[str, str | dict[str, str]] = {
        "forced": {k: os.environ[k] for s in SETTINGS.values() for k in s if k in os.environ}
    }
    try:
        import torch

        out["torch"] = torch.backends.cpu.get_cpu_capability()
    except Exception as err:  # noqa: BLE001 (a report field, never fatal)
        out["torch"] = f"unavailable: {type(err).__name__}"
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as feats

        out["numpy_top"] = next(
            (f for f in ("AVX512_SPR", "AVX512_ICL", "AVX512_SKX", "AVX2", "SSE42") if feats.get(f)),
            "baseline",
        )
    except ImportError:
        out["numpy_top"] = np.__version__
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m casu_dataset.core.isa SETTING -- COMMAND ...`: run COMMAND under a forced setting."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        print(
            f"usage: python -m casu_dataset.core.isa {{{','.join(SETTINGS)}}} -- COMMAND ...", file=sys.stderr
        )
        return 2
    try:
        env = env_for(argv[0])
    except KeyError as err:
        print(f"error: {err.args[0]}", file=sys.stderr)
        return 2
    os.execvpe(argv[2], argv[2:], env)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
