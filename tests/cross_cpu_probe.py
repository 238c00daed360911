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

    from casu_dataset.dataset.lock import lock_path, read_lock, realize_locked
    from casu_dataset.families.compile import DEFAULT_V2_DIR, compile_families
    from casu_dataset.mix.mixer import MixConfig
    from casu_dataset.mix.realize import SceneBuilder
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Retriever
    from casu_dataset.speech.layer import SpeechSynth
    from casu_dataset.speech.voices import VoiceRegistry

    # As a locked build's builder (no retrieval or Whisper runs: every decision is the lock's).
    cache = spec["speech_cache"]
    b = SceneBuilder(
        Retriever(Catalog.embedded(), cache_dir=cache), SpeechSynth(cache), VoiceRegistry(), MixConfig()
    )
    scenes = {s.script.id: s for s in compile_families(DEFAULT_V2_DIR)}
    locks = {r: read_lock(lock_path(DEFAULT_V2_DIR, r)) for r in {s["realization"] for s in spec["scenes"]}}
    out = {}
    for s in spec["scenes"]:
        entry = locks[s["realization"]].entry(s["scene_id"])
        _, flac, drift = realize_locked(scenes[s["scene_id"]], entry, b)
        out[f"{s['realization']}:{s['scene_id']}"] = {
            "stems": {k: hashlib.sha256(v).hexdigest() for k, v in flac.items()},
            "drift": drift.to_dict(),
        }
    return {"scenes": out, "misses": b.synth.misses}


if __name__ == "__main__":
    what, spec_path = sys.argv[1], sys.argv[2]
    spec = json.loads(Path(spec_path).read_text())
    print(json.dumps({"tts": tts, "mix": mix}[what](spec)))
