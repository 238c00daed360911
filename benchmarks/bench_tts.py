"""TTS speed per engine as a real-time factor (synthesis time / audio duration), and the cached re-run."""

from __future__ import annotations

import json
import shutil
import tempfile
import time

import soundfile as sf

from casu_dataset.speech.engines import get_engine
from casu_dataset.speech.intelligibility import SENTENCES
from casu_dataset.speech.layer import SpeechSynth
from casu_dataset.speech.voices import FALLBACK, VoiceRegistry


def run(sentences=SENTENCES[:8]) -> dict:
    reg = VoiceRegistry(VoiceRegistry().voices + FALLBACK)
    res = {}
    d = tempfile.mkdtemp(prefix="casu-bench-tts-")
    try:
        synth = SpeechSynth(d)
        for vid in ("piper-joe", "flite-slt", "flite-kal16", "espeak-m"):
            v = reg[vid]
            if not get_engine(v.engine).available():
                res[vid] = "engine not installed"
                continue
            synth.synthesize("Warm up.", v)  # model load is not synthesis speed
            t = time.perf_counter()
            paths = [synth.synthesize(s, v) for s in sentences]
            dt = time.perf_counter() - t
            audio_s = sum(sf.info(str(p)).duration for p in paths)
            t = time.perf_counter()
            again = [synth.synthesize(s, v) for s in sentences]
            cached = time.perf_counter() - t
            assert again == paths
            res[vid] = {
                "rtf": dt / audio_s,
                "x_realtime": audio_s / dt,
                "audio_s": audio_s,
                "synth_s": dt,
                "cached_rerun_s": cached,
            }
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return res


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
