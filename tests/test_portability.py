"""The numbers CASU records are the same on every x86-64 CPU: proven on one machine by running
the same computations under forced instruction-set settings (casu_dataset/core/isa.py: torch's ATen
and MKL/oneDNN dispatch, CTranslate2's ISA, numpy's dispatched loops, OpenBLAS's core type).

What these guard against: a float32 MiniLM encoder gives other bytes under AVX-512 than under
the generic kernels (and for a sentence alone vs in a batch), and int8 Whisper can hear
"seatbelt fastened" as "seat look fast and" under the AVX2 and AVX-512 kernels but not the
generic one."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from casu_dataset.core.isa import FORCED_VARS, SETTINGS, describe, env_for, portable_env, unforced_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def probes(speech_wavs, clips_dir):
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    wav = SpeechSynth().synthesize(
        "Please keep your seatbelt fastened while the sign is on.", VoiceRegistry()["flite-slt"]
    )
    args = [
        str(wav),
        str(clips_dir / "ba__school_playground__School1.ogg"),
        str(clips_dir / "ev__electric_bell_ring__savebell2.ogg"),
    ]
    out = {}
    for name in SETTINGS:
        p = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "isa_probe.py"), *args],
            env=env_for(name),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, f"{name}: {p.stderr[-2000:]}"
        out[name] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def test_settings_really_force_the_kernels(probes):
    # Each setting changes what torch dispatches to (else the comparison below proves nothing).
    assert probes["generic"]["machine"]["torch"] == "DEFAULT"
    assert probes["avx2"]["machine"]["torch"] == "AVX2"
    assert probes["generic"]["machine"]["numpy_top"] not in ("AVX2", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR")
    assert not probes["avx2"]["machine"]["numpy_top"].startswith("AVX512")


@pytest.mark.parametrize("field", ["embeddings", "scores", "pick", "whisper", "bertscore", "mix", "gains"])
def test_same_numbers_under_every_instruction_set(probes, field):
    got = {name: p[field] for name, p in probes.items()}
    assert len({json.dumps(v, sort_keys=True) for v in got.values()}) == 1, got


def test_batch_mates_do_not_change_an_embedding(probes):
    for p in probes.values():
        assert p["embeddings"] == p["embeddings_batched"]


def test_whisper_hears_the_sentence_everywhere(probes):
    assert all(p["whisper"]["wer"] < 0.25 for p in probes.values())


def test_env_for_names_unknown_settings_and_resets_inherited_overrides():
    with pytest.raises(KeyError, match="expected one of native, avx2, generic"):
        env_for("avx9000")
    env = env_for("native", {"CT2_FORCE_CPU_ISA": "GENERIC", "PATH": "/bin"})
    assert env == {"PATH": "/bin"}
    assert "torch" in describe()


def test_unforced_and_portable_envs_drop_every_inherited_isa_setting():
    """A machine that exports a forced setting (OPENBLAS_CORETYPE=Haswell) must not reach a process
    meant to take its CPU's own kernels (tests/test_cross_cpu.py's emulated mixes) or the pin."""
    inherited = {"OPENBLAS_CORETYPE": "Haswell", "NPY_DISABLE_CPU_FEATURES": "AVX2"}
    inherited["OPENBLAS_L2_SIZE"] = "512"  # a cache size, not a kernel choice: kept
    assert unforced_env({**inherited, "PATH": "/bin"}) == {"OPENBLAS_L2_SIZE": "512", "PATH": "/bin"}
    pinned = portable_env(inherited)
    assert "OPENBLAS_CORETYPE" not in pinned and "NPY_DISABLE_CPU_FEATURES" not in pinned
    assert set(FORCED_VARS) == {k for s in SETTINGS.values() for k in s}
