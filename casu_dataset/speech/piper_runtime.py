"""Piper's voices on pinned kernels: the same samples on every x86-64 CPU.

Piper ships its VITS voices as ONNX graphs for onnxruntime, which picks its kernels from CPUID
with no override (the same sentence gave other bytes on an AVX2 and an AVX-512 CPU). Here Piper's
own phonemizer and phoneme ids are kept, and the graph runs on torch (`onnx_graph.OnnxGraph`,
float32) in a process started with `core.isa.PORTABLE_ENV`, so the same instructions run on
every CPU. A build process that is not itself pinned talks to one such worker process
(`PiperWorker`), started on first use and kept for the process's lifetime.

Noise: with `noise=False` (CASU's default) the graph's noise is zero. With
`noise=True`, Piper's default noise scales apply and the noise comes from a torch generator
seeded from the sentence, so the livelier prosody is reproducible too.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from casu_dataset.core import isa
from casu_dataset.core.errors import RunError

RUNTIME = "casu-pinned-torch-f32"  # part of every Piper turn's cache key (engines.PiperEngine.version)
RUNTIME_VERSION = 1


class PiperRuntimeError(RunError, RuntimeError):
    """A voice that cannot be loaded or run; the message names the voice files."""


class PortablePiper:
    """One Piper voice: text -> float32 audio, computed on this process's (pinned) kernels."""

    def __init__(self, onnx_path: str, config_path: str):
        import torch
        from piper.config import PiperConfig
        from piper.voice import PiperVoice

        from casu_dataset.speech.onnx_graph import OnnxGraph, OnnxGraphError

        torch.set_num_threads(1)
        torch._C._set_mkldnn_enabled(False)  # oneDNN picks its kernels (and blocking) per CPU
        try:
            cfg = json.loads(Path(config_path).read_text(encoding="utf-8"))
            # The phonemizer and id map need no inference session: Piper's own code, unchanged.
            self.voice = PiperVoice(session=None, config=PiperConfig.from_dict(cfg))  # type: ignore[arg-type]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise PiperRuntimeError(
                f"piper: voice config {config_path}: {type(err).__name__}: {err}"
            ) from None
        try:
            self.graph = OnnxGraph(onnx_path, dtype=torch.float32)
        except OnnxGraphError as err:
            raise PiperRuntimeError(f"piper: {err}") from None
        self.sample_rate = int(self.voice.config.sample_rate)

    def synthesize(self, text: str, length_scale: float = 1.0, noise: bool = False) -> np.ndarray:
        """Piper's `synthesize` loop (one chunk per sentence, each peak-normalised and clipped),
        concatenated: mono float32 at `self.sample_rate`. Empty when nothing is speakable."""
        import torch

        cfg = self.voice.config
        noise_scale, noise_w = (cfg.noise_scale, cfg.noise_w_scale) if noise else (0.0, 0.0)
        # Piper feeds its scales as float32; the same values here.
        scales = torch.from_numpy(np.array([noise_scale, length_scale, noise_w], dtype=np.float32))
        chunks = []
        for phonemes in self.voice.phonemize(text):
            if not phonemes:
                continue
            ids = self.voice.phonemes_to_ids(phonemes)
            gen = None
            if noise:
                seed = int.from_bytes(hashlib.sha256(" ".join(phonemes).encode()).digest()[:8], "big")
                gen = torch.Generator().manual_seed(seed)
            feeds = {
                "input": torch.tensor([ids], dtype=torch.int64),
                "input_lengths": torch.tensor([len(ids)], dtype=torch.int64),
                "scales": scales,
            }
            if cfg.num_speakers > 1:  # Piper's default speaker of a multi-speaker voice
                feeds["sid"] = torch.tensor([cfg.default_speaker_id], dtype=torch.int64)
            audio = self.graph.run(feeds, generator=gen)[0].reshape(-1).numpy().astype(np.float32)
            peak = np.max(np.abs(audio)) if audio.size else np.float32(0)
            audio = np.zeros_like(audio) if peak < 1e-8 else audio / peak
            chunks.append(np.clip(audio, -1.0, 1.0).astype(np.float32))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


@functools.lru_cache(maxsize=4)
def _local_voice(onnx_path: str, config_path: str) -> PortablePiper:
    return PortablePiper(onnx_path, config_path)


# ------------------------------------------------------------------ the worker process
# Protocol, one request at a time over the worker's stdin/stdout: the parent writes one JSON line
# {"onnx", "config", "text", "length_scale", "noise"}; the worker answers one JSON line
# {"samples": N, "sample_rate": SR} followed by N little-endian float32 samples, or {"error": msg}.


def serve(stdin=None, stdout=None) -> int:
    """The worker's loop (`python -m casu_dataset.speech.piper_runtime`)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    if not isa.in_portable_process():
        stdout.write(
            json.dumps({"error": "the Piper worker must be started with core.isa.portable_env()"}).encode()
        )
        stdout.write(b"\n")
        stdout.flush()
        return 2
    for line in stdin:
        head: dict[str, object]
        try:
            req = json.loads(line)
            v = _local_voice(req["onnx"], req["config"])
            audio = v.synthesize(req["text"], float(req["length_scale"]), bool(req["noise"]))
            head = {"samples": int(audio.shape[0]), "sample_rate": v.sample_rate}
            body = audio.astype("<f4").tobytes()
        except Exception as err:  # noqa: BLE001 (every failure goes back to the parent, named)
            head, body = {"error": f"{type(err).__name__}: {err}"}, b""
        stdout.write(json.dumps(head).encode() + b"\n" + body)
        stdout.flush()
    return 0


class PiperWorker:
    """A pinned worker process, started on first use; `synthesize` is thread-safe."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._stderr = None

    def _start(self) -> subprocess.Popen:
        self._stderr = tempfile.TemporaryFile()
        # The worker must import this package as the parent does (a source checkout or the wheel).
        env = isa.portable_env()
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "casu_dataset.speech.piper_runtime"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        atexit.register(self.close)
        return self._proc

    def _died(self, what: str) -> PiperRuntimeError:
        tail = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip()[-1500:]
        self.close()
        return PiperRuntimeError(f"piper: the pinned worker process {what}" + (f":\n{tail}" if tail else ""))

    def synthesize(
        self, onnx_path: str, config_path: str, text: str, length_scale: float, noise: bool
    ) -> tuple[np.ndarray, int]:
        req = {
            "onnx": onnx_path,
            "config": config_path,
            "text": text,
            "length_scale": length_scale,
            "noise": noise,
        }
        with self._lock:
            proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(req).encode() + b"\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (BrokenPipeError, OSError):
                raise self._died("exited") from None
            if not line:
                raise self._died("exited")
            head = json.loads(line)
            if "error" in head:
                raise PiperRuntimeError(f"piper: {head['error']}")
            n = int(head["samples"])
            body = proc.stdout.read(4 * n)
            if len(body) != 4 * n:
                raise self._died(f"sent {len(body)} of {4 * n} bytes")
        return np.frombuffer(body, dtype="<f4").astype(np.float32), int(head["sample_rate"])

    def close(self) -> None:
        p, self._proc = self._proc, None
        if p is not None and p.poll() is None:
            try:
                if p.stdin:
                    p.stdin.close()
                p.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


_WORKER = PiperWorker()


def synthesize(
    onnx_path: str, config_path: str, text: str, length_scale: float = 1.0, noise: bool = False
) -> tuple[np.ndarray, int]:
    """Text -> (mono float32, sample rate) on pinned kernels: in this process when it was started
    pinned (a worker, or a test under qemu), else in the worker process."""
    if isa.in_portable_process():
        v = _local_voice(str(onnx_path), str(config_path))
        return v.synthesize(text, length_scale, noise), v.sample_rate
    return _WORKER.synthesize(str(onnx_path), str(config_path), text, length_scale, noise)


def _main() -> int:
    return serve()


if __name__ == "__main__":
    raise SystemExit(_main())
