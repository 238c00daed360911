"""Run by tests/test_cross_cpu.py, natively and under `qemu-x86_64 -cpu MODEL`: prints as JSON
what a build on that CPU records for a sample of the shipped library's lock.

    cross_cpu_probe.py tts SPEC   each turn synthesised afresh (a new speech cache): its length and
                                  PCM hash as the lock records them. Run under core.isa.PORTABLE_ENV,
                                  as the build's Piper worker is; flite and espeak-ng are run under
                                  the same emulated CPU through SPEC's `wrap` command.
    cross_cpu_probe.py mix SPEC   each scene rendered from its lock entry (realize_locked, as a locked
                                  build does), its turns read from SPEC's speech cache: stem hashes.
                                  Run without the pin, as the build's mixing is.

SPEC (JSON): {"speech_cache": dir, "wrap": [argv prefix] or null,
              "turns": [{"key", "text", "voice"}], "scenes": [{"scene_id", "realization"}]}
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def _wrap_engines(prefix: list[str] | None) -> None:
    """Run the command-line engines through `prefix` (qemu with this probe's CPU model): a process
    that qemu-user starts runs natively otherwise."""
    if not prefix:
        return
    import shutil

    from casu_dataset.speech import engines

    def run_wrapped(self, args, text):
        real = shutil.which(self.binary)
        orig = engines.shutil.which

        def which(name, *a, **k):
            return wrapper if name == self.binary else orig(name, *a, **k)

        d = tempfile.mkdtemp()
        wrapper = str(Path(d) / self.binary)
        Path(wrapper).write_text("#!/bin/sh\nexec " + " ".join(prefix) + f" {real} " + '"$@"\n')
        Path(wrapper).chmod(0o755)
        engines.shutil.which = which
        try:
            return _orig_run(self, args, text)
        finally:
            engines.shutil.which = orig

    _orig_run = engines._CommandEngine._run
    engines._CommandEngine._run = run_wrapped  # type: ignore[method-assign]


def tts(spec: dict) -> dict:
    from casu_dataset.core.audio_io import array_sha256
    from casu_dataset.core.isa import describe, in_portable_process
    from casu_dataset.mix.mixer import ClipCache
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import FALLBACK, VoiceRegistry

    _wrap_engines(spec.get("wrap"))
    reg = VoiceRegistry(VoiceRegistry().voices + FALLBACK)
    synth = SpeechSynth(tempfile.mkdtemp())  # fresh: every turn is synthesised here
    cache = ClipCache(16000)
    out = {}
    for t in spec["turns"]:
        x = cache.get(str(synth.synthesize(t["text"], reg[t["voice"]]))).audio
        out[t["key"]] = {"samples": int(x.shape[0]), "pcm_sha256": array_sha256(x)}
    return {"machine": describe(), "pinned": in_portable_process(), "turns": out, "misses": synth.misses}


def mix(spec: dict) -> dict:
    import hashlib

    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, compile_families
    from casu_dataset.formats.lock import lock_path, read_lock
    from casu_dataset.mix.mixer import MixConfig
    from casu_dataset.mix.realize import SceneBuilder
    from casu_dataset.mix.realize_locked import realize_locked
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    # As a locked build's builder (no retrieval or Whisper runs: every decision is the lock's).
    cache = spec["speech_cache"]
    b = SceneBuilder(
        Retriever(Catalog.embedded(), cache_dir=cache), SpeechSynth(cache), VoiceRegistry(), MixConfig()
    )
    scenes = {s.script.id: s for s in compile_families(DEFAULT_FAMILY_LIBRARY)}
    locks = {
        r: read_lock(lock_path(DEFAULT_FAMILY_LIBRARY, r)) for r in {s["realization"] for s in spec["scenes"]}
    }
    out = {}
    for s in spec["scenes"]:
        entry = locks[s["realization"]].entry(s["scene_id"])
        _, flac, drift = realize_locked(scenes[s["scene_id"]], entry, b)
        out[f"{s['realization']}:{s['scene_id']}"] = {
            "stems": {k: hashlib.sha256(v).hexdigest() for k, v in flac.items()},
            "drift": drift.to_dict(),
        }
    return {"scenes": out, "misses": b.synth.misses, "loudness": loudness()}


LOUDNESS_CLIPS = (
    "ba__rain__StereoRain.ogg",
    "ev__phone_ring__phone-incoming-call.ogg",
    "ev__bottle_glass_clink__glass.ogg",
)


def loudness() -> dict[str, str]:
    """The mixer's loudness measurements (float.hex) on real bank clips: whole clips, a window of a
    clip's running energy (a bed), a sparse 30 s layer over its support (events), and pyloudnorm's
    own meter. A relock on any CPU must measure the same gains from these."""
    import numpy as np

    from casu_dataset.core.audio_io import load_audio
    from casu_dataset.core.loudness import RunningEnergy, gated_lufs, kweight, measure_lufs, merged_spans
    from casu_dataset.sounds.bank import bank_dir

    sr = 16000
    out = {}
    layer, spans = np.zeros(30 * sr, dtype=np.float32), []
    for i, name in enumerate(LOUDNESS_CLIPS):
        x = load_audio(bank_dir() / "audio" / name)
        kw = kweight(x, sr)
        out[f"{name} gated"] = gated_lufs(kw, sr).hex()
        out[f"{name} pyloudnorm"] = measure_lufs(x, sr).hex()
        if kw.shape[0] > 3 * sr:
            out[f"{name} window"] = RunningEnergy(kw).gated_lufs(sr, 1234, kw.shape[0] - 2345).hex()
        at = (3 + 9 * i) * sr
        clip = kw[: min(kw.shape[0], 30 * sr - at)]
        layer[at : at + clip.shape[0]] += np.float32(0.5 + i) * clip
        spans.append((at, at + clip.shape[0]))
    out["layer over its support"] = gated_lufs(layer, sr, merged_spans(spans)).hex()
    return out


if __name__ == "__main__":
    what, spec_path = sys.argv[1], sys.argv[2]
    spec = json.loads(Path(spec_path).read_text())
    print(json.dumps({"tts": tts, "mix": mix}[what](spec)))
