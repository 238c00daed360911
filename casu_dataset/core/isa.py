"""Kernel settings: the pinned environment that makes CASU's speech the same bits on every x86-64
CPU, and forced instruction-set settings that exercise other kernels on one machine.

`PORTABLE_ENV` pins every run-time kernel choice that a TTS process makes to one that does not
depend on the CPU: torch's generic ATen kernels, MKL's conditional numerical reproducibility
(its SSE2 code path on every CPU), glibc's baseline libm (its FMA/AVX2 variants masked), one
thread, and oneDNN off (speech/piper_runtime.py turns it off in-process). Piper's voices run in a
process started with it; tests/test_cross_cpu.py checks the result against the lock under real
other CPUIDs (`qemu-x86_64 -cpu Nehalem` and `-cpu Haswell`).

The forced settings below are weaker evidence: they change what each library dispatches to on
this machine, which is not what another CPU does (PyTorch issue #155552: `ATEN_CPU_CAPABILITY=avx2`
on an AVX-512 CPU does not reproduce an AVX2 CPU, and onnxruntime has no override at all). The
suite runs its numerics-sensitive checks under each (tests/test_portability.py) and `make
test-isa` runs the whole suite under each; tests/test_cross_cpu.py is the real-CPUID check.

- `ATEN_CPU_CAPABILITY` (torch's own vectorised kernels: default / avx2 / avx512),
- `MKL_ENABLE_INSTRUCTIONS` (torch's MKL GEMM; also CTranslate2's MKL backend),
- `ONEDNN_MAX_CPU_ISA` (torch's and CTranslate2's oneDNN kernels, AMX included),
- `CT2_FORCE_CPU_ISA` (CTranslate2, i.e. faster-whisper: GENERIC / AVX2 / AVX512),
- `NPY_DISABLE_CPU_FEATURES` (numpy's dispatched ufunc loops, e.g. its AVX-512 SVML exp/sin),
- `OPENBLAS_CORETYPE` (numpy's and scipy's OpenBLAS kernels).
onnxruntime has no such override, which is why Piper's graph runs on torch here (speech/piper_runtime.py).
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


# glibc picks FMA/AVX2 variants of exp, log, pow, sin, ... (and of libmvec) by CPUID; masking the
# features makes every CPU take the baseline code (names as glibc 2.36 spells them).
_GLIBC_MASK = "glibc.cpu.hwcaps=-AVX,-AVX2,-FMA,-FMA4,-AVX512F,-AVX512DQ,-AVX512BW,-AVX512VL,-AVX512CD"

PORTABLE_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE,STRICT",
    "MKL_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "GLIBC_TUNABLES": _GLIBC_MASK,
}


FORCED_VARS = frozenset(k for s in SETTINGS.values() for k in s)


def unforced_env(base: dict | None = None) -> dict[str, str]:
    """The environment (`base`, default this process's) less every forced ISA setting: a process
    that takes its own CPU's kernels. An inherited one can do worse than mislead: with
    OPENBLAS_CORETYPE=Haswell, numpy's import runs AVX2 code on an SSE4.2 CPU (SIGILL)."""
    env = dict(os.environ if base is None else base)
    for k in FORCED_VARS:
        env.pop(k, None)
    return env


def portable_env(base: dict | None = None) -> dict[str, str]:
    """The environment of a process whose kernels are pinned to `PORTABLE_ENV` (a forced ISA
    setting inherited from the caller is dropped: the pin says everything it needs)."""
    env = unforced_env(base)
    env.update(PORTABLE_ENV)
    return env


def in_portable_process() -> bool:
    """Whether this process was started with `PORTABLE_ENV` (the variables are read when each
    library starts, so setting them later does not count)."""
    return all(os.environ.get(k) == v for k, v in PORTABLE_ENV.items())


def env_for(name: str, base: dict | None = None) -> dict[str, str]:
    """The environment of a process forced to setting `name` (KeyError naming the settings)."""
    if name not in SETTINGS:
        raise KeyError(f"ISA setting {name!r}: expected one of {', '.join(SETTINGS)}")
    env = unforced_env(base)  # a setting says everything it forces; nothing leaks in from the caller
    env.update(SETTINGS[name])
    return env


def describe() -> dict:
    """What this process computes with: the kernels torch and numpy dispatched to, and any
    override in force (recorded in build reports, so drift can be traced to a machine)."""
    import numpy as np

    out: dict[str, str | dict[str, str]] = {
        "forced": {k: os.environ[k] for k in sorted(FORCED_VARS) if k in os.environ}
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
