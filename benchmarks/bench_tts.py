"""TTS speed per engine as a real-time factor (synthesis time / audio duration), and the cached re-run.

Baseline in the same run: Piper's own onnxruntime session (one thread, as a build worker runs it)
on the same sentences. CASU runs Piper's graph on pinned torch kernels instead (the same samples
on every x86-64 CPU: casu_dataset/speech/piper_runtime.py); `ratio_piper_pinned_vs_onnxruntime`
is what that portability costs."""

from __future__ import annotations

import json
import shutil
import tempfile
import time

import numpy as np
import soundfile as sf

from casu_dataset.speech.engines import PiperEngine, get_engine
from casu_dataset.speech.intelligibility import SENTENCES
from casu_dataset.speech.layer import SpeechSynth
from casu_dataset.speech.voices import FALLBACK, VoiceRegistry


def _onnxruntime_rtf(sentences) -> dict:
    """Piper's stock runtime (onnxruntime, CPUID-dispatched kernels) on the packaged voice."""
    import onnxruntime as ort
    from piper import PiperVoice
    from piper.config import PiperConfig

    onnx, cfg = PiperEngine.voice_files("joe")
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    session = ort.InferenceSession(onnx, sess_options=so, providers=["CPUExecutionProvider"])
    voice = PiperVoice(session=session, config=PiperConfig.from_dict(json.load(open(cfg))))

    def speak(text: str) -> int:
        return sum(np.asarray(c.audio_float_array).shape[0] for c in voice.synthesize(text))

    speak("Warm up.")
    t = time.perf_counter()
    samples = sum(speak(s) for s in sentences)
    dt = time.perf_counter() - t
    audio_s = samples / voice.config.sample_rate
    return {"rtf": dt / audio_s, "audio_s": audio_s, "synth_s": dt}


def run(quick: bool = False) -> dict:
    sentences = SENTENCES[:2] if quick else SENTENCES[:8]
    reg = VoiceRegistry(VoiceRegistry().voices + FALLBACK)
    res: dict = {"sentences": len(sentences)}
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
        res["piper-joe_onnxruntime"] = _onnxruntime_rtf(sentences)
        if isinstance(res.get("piper-joe"), dict):
            res["ratio_piper_pinned_vs_onnxruntime"] = (
                res["piper-joe"]["rtf"] / res["piper-joe_onnxruntime"]["rtf"]
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return res


if __name__ == "__main__":
    import sys

    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
