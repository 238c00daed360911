"""One CASU-mini on every real CPU: a sample of the shipped library's locked turns and scenes,
built natively and under QEMU's emulated Nehalem (SSE4.2) and Haswell (AVX2) CPUs, gives the
lock's bytes.

qemu-user runs this project's Python with the CPUID of another CPU, so every library that picks
its kernels at run time (MKL, ATen, numpy, glibc's libm, soxr, libFLAC) really takes that CPU's
path, which forced environment variables do not achieve (onnxruntime, Piper's old runtime, had
none; it gave other bytes on an AVX2 CPU than on the AVX-512 CPU that made the 3.1.1 lock). The
sample: the shortest locked turn of every voice kind (engine, base voice, adult or child,
pitch-shifted or not), espeak-ng (not in the library's pool: compared with the native run), and
one scene of each mixing path (a slot family, a crossed family, realization 2's speech_scale),
mixed from the natively synthesised turns (checked against the lock first).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import ROOT

from casu_dataset.core.isa import portable_env, unforced_env
from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families
from casu_dataset.formats.lock import lock_path, read_lock

pytestmark = pytest.mark.slow

CPUS = {"Nehalem": "SSE42", "Haswell": "AVX2"}  # QEMU model -> numpy's top feature it must report
PROBE = ROOT / "tests" / "cross_cpu_probe.py"
ESPEAK = [("espeak:m", "Stop where you are.", "espeak-m"), ("espeak:f", "It's time to go.", "espeak-f")]


def _voice_kind(v: dict) -> str:
    shifted = "shifted" if (v["pitch_st"], v["tempo"]) != (0.0, 1.0) else "plain"
    return f"{v['engine']}:{v['base']}:{v['age']}:{shifted}"


def sample(lock1, lock2) -> tuple[list[dict], list[dict]]:
    """(turns, scenes): the shortest locked turn of each voice kind, and the shortest scene of each
    mixing path."""
    turns: dict[str, dict] = {}
    for sid, e in sorted(lock1.scenes.items()):
        ann = e["annotation"]
        voices = ann["extra"]["speech"]["voices"]
        for t, locked in zip(ann["turns"], e["turns"]):
            v = voices[t["speaker"]]
            kind = _voice_kind(v)
            cand = {"key": kind, "text": t["text"], "voice": v["id"], **locked}
            if kind not in turns or locked["samples"] < turns[kind]["samples"]:
                turns[kind] = cand
    shapes = {s.script.id: s.shape for s in compile_families(DEFAULT_FAMILY_LIBRARY)}

    def shortest(lock, ok) -> str:
        ids = [sid for sid, e in lock.scenes.items() if ok(sid, e)]
        assert ids, "no scene of this mixing path in the lock"
        return min(ids, key=lambda sid: (lock.scenes[sid]["annotation"]["num_samples"], sid))

    scenes = [
        {"scene_id": shortest(lock1, lambda sid, e: shapes[sid] == "slot"), "realization": 1},
        {"scene_id": shortest(lock1, lambda sid, e: shapes[sid] == "crossed"), "realization": 1},
        {
            "scene_id": shortest(
                lock2, lambda sid, e: "speech_scale" in e["annotation"]["extra"].get("realization", {})
            ),
            "realization": 2,
        },
    ]
    return sorted(turns.values(), key=lambda t: t["key"]), scenes


@pytest.fixture(scope="module")
def shipped():
    lock1 = read_lock(lock_path(DEFAULT_FAMILY_LIBRARY, 1))
    lock2 = read_lock(lock_path(DEFAULT_FAMILY_LIBRARY, 2))
    turns, scenes = sample(lock1, lock2)
    return {1: lock1, 2: lock2}, turns, scenes


def test_the_sample_covers_every_engine_and_voice_kind(shipped):
    _, turns, scenes = shipped
    kinds = {t["key"] for t in turns}
    assert {k.split(":")[0] for k in kinds} == {"piper", "flite"}
    assert any(k.startswith("piper:") and k.endswith(":shifted") for k in kinds)
    assert any(":child:" in k for k in kinds)
    assert len(scenes) == 3


@pytest.fixture(scope="module")
def native(shipped, tmp_path_factory):
    """The sample built natively, by the build's own code path (Piper in its pinned worker)."""
    from casu_dataset.core.audio_io import array_sha256
    from casu_dataset.mix.mixer import ClipCache
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import FALLBACK, VoiceRegistry

    locks, turns, scenes = shipped
    cache_dir = tmp_path_factory.mktemp("xcpu")
    reg = VoiceRegistry(VoiceRegistry().voices + FALLBACK)
    synth, clips = SpeechSynth(cache_dir), ClipCache(16000)
    got = {}
    for t in [*turns, *({"key": k, "text": x, "voice": v} for k, x, v in ESPEAK)]:
        x = clips.get(str(synth.synthesize(t["text"], reg[t["voice"]]))).audio
        got[t["key"]] = {"samples": int(x.shape[0]), "pcm_sha256": array_sha256(x)}
    spec = {"speech_cache": str(cache_dir), "turns": turns, "scenes": scenes}
    (cache_dir / "spec.json").write_text(json.dumps(spec))
    # The scenes natively (their turns fill the speech cache the emulated mixes read).
    p = subprocess.run(
        [sys.executable, str(PROBE), "mix", str(cache_dir / "spec.json")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return cache_dir, got, json.loads(p.stdout.strip().splitlines()[-1])


def _check_turns(where: str, got: dict, turns: list[dict]) -> None:
    bad = [
        f"{t['key']} ({t['voice']}, {t['text']!r}): {got[t['key']]} != "
        f"lock {t['samples']}/{t['pcm_sha256'][:12]}"
        for t in turns
        if got[t["key"]] != {"samples": t["samples"], "pcm_sha256": t["pcm_sha256"]}
    ]
    assert not bad, f"{where}: turns differ from the lock:\n" + "\n".join(bad)


def _check_scenes(where: str, got: dict, locks: dict, scenes: list[dict]) -> None:
    for s in scenes:
        entry = locks[s["realization"]].entry(s["scene_id"])
        want = {k: v["sha256"] for k, v in entry["stems"].items()}
        have = got["scenes"][f"{s['realization']}:{s['scene_id']}"]
        assert have["stems"] == want, (
            f"{where}: realization {s['realization']} {s['scene_id']}: {have['drift']}"
        )


def test_native_build_gives_the_locks_bytes(shipped, native):
    locks, turns, scenes = shipped
    _, got, mixed = native
    _check_turns("native", got, turns)
    _check_scenes("native", mixed, locks, scenes)


# TTS processes per CPU: QEMU emulates AVX2 ~4x slower than SSE4.2 (a Piper sentence takes ~150 s
# under Haswell against ~35 s under Nehalem), so Haswell's turns go to two processes.
TTS_SHARDS = {"Nehalem": 1, "Haswell": 2}


def _jobs(turns: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """(cpu, what, turns) for each process, the costliest first so that two cores finish together:
    Piper turns are dealt first among a CPU's shards, as they cost most."""
    ordered = sorted(turns, key=lambda t: not t["voice"].startswith("piper"))
    tts = [(cpu, "tts", ordered[i::k]) for cpu, k in TTS_SHARDS.items() for i in range(k)]
    tts.sort(key=lambda j: -len(j[2]) * (4 if j[0] == "Haswell" else 1))
    return [*tts, *((cpu, "mix", []) for cpu in CPUS)]


@pytest.fixture(scope="module")
def emulated(native):
    """Both emulated CPUs, in five processes on two cores: TTS pinned as the build's worker is
    (TTS_SHARDS), and the mixes unpinned as the build's mixing is."""
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-user is required for this test: `make setup` installs it (apt-get install qemu-user)"
    cache_dir = native[0]
    spec = json.loads((cache_dir / "spec.json").read_text())
    pinned = portable_env()
    # The real CPUID path: a forced ISA setting in this environment (a machine may export
    # OPENBLAS_CORETYPE=Haswell) would override it, or crash an emulated SSE4.2 CPU.
    unpinned = {k: v for k, v in unforced_env().items() if k not in pinned or pinned[k] == v}
    turns = [*spec["turns"], *({"key": k, "text": x, "voice": v} for k, x, v in ESPEAK)]

    def run(job: tuple[int, tuple[str, str, list[dict]]]) -> tuple[str, str, dict, float]:
        n, (cpu, what, shard) = job
        prefix = [qemu, "-cpu", cpu]
        f = cache_dir / f"spec-{n}.json"
        f.write_text(json.dumps({**spec, "wrap": prefix, "turns": shard}))
        t = time.perf_counter()
        p = subprocess.run(
            [*prefix, sys.executable, str(PROBE), what, str(f)],
            env=pinned if what == "tts" else unpinned,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        # qemu's warnings about CPU features it lacks go to stderr; the result is stdout's last line.
        assert p.returncode == 0, f"{cpu} {what}: {p.stderr[-3000:]}"
        return cpu, what, json.loads(p.stdout.strip().splitlines()[-1]), time.perf_counter() - t

    t0 = time.perf_counter()
    out: dict = {cpu: {"tts": {"turns": {}}, "seconds": []} for cpu in CPUS}
    with ThreadPoolExecutor(2) as pool:
        for cpu, what, res, took in pool.map(run, enumerate(_jobs(turns))):
            out[cpu]["seconds"].append(f"{what} {took:.0f}")
            if what == "mix":
                out[cpu]["mix"] = res
            else:
                out[cpu]["tts"]["turns"].update(res.pop("turns"))
                out[cpu]["tts"].setdefault("shards", []).append(res)
    took = "; ".join(f"{c}: {', '.join(out[c]['seconds'])}" for c in CPUS)
    print(f"cross-CPU probes: {time.perf_counter() - t0:.0f} s on two cores ({took})")
    return out


@pytest.mark.parametrize("cpu", list(CPUS))
def test_emulated_cpu_is_really_that_cpu(emulated, cpu):
    for shard in emulated[cpu]["tts"]["shards"]:
        m = shard["machine"]
        assert m["numpy_top"] == CPUS[cpu] and m["torch"] == "DEFAULT" and shard["pinned"]


@pytest.mark.parametrize("cpu", list(CPUS))
def test_tts_on_another_cpu_gives_the_locks_bytes(shipped, native, emulated, cpu):
    _, turns, _ = shipped
    got = emulated[cpu]["tts"]["turns"]
    _check_turns(cpu, got, turns)
    for key, _, _ in ESPEAK:  # not in the library: the same as the native run
        assert got[key] == native[1][key], key


@pytest.mark.parametrize("cpu", list(CPUS))
def test_mixing_on_another_cpu_gives_the_locks_bytes(shipped, emulated, cpu):
    locks, _, scenes = shipped
    assert emulated[cpu]["mix"]["misses"] == 0  # every turn came from the native cache
    _check_scenes(cpu, emulated[cpu]["mix"], locks, scenes)


@pytest.mark.parametrize("cpu", list(CPUS))
def test_loudness_on_another_cpu_gives_the_same_bits(emulated, cpu):
    """What a relock measures (the gains of an unlocked build) is the same number on every CPU."""
    sys.path.insert(0, str(PROBE.parent))
    from cross_cpu_probe import loudness

    native = loudness()
    assert len(native) >= 8
    assert emulated[cpu]["mix"]["loudness"] == native


def test_the_pinned_environment_is_what_the_worker_gets():
    env = portable_env({"PATH": os.environ["PATH"], "ATEN_CPU_CAPABILITY": "avx2"})
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["MKL_CBWR"].startswith("COMPATIBLE")
    assert "-FMA" in env["GLIBC_TUNABLES"] and env["OMP_NUM_THREADS"] == "1"
