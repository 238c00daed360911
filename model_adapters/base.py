"""The adapter interface: batches of (16 kHz audio, prompt) in, texts (or option scores) out."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import numpy as np


class AdapterError(RuntimeError):
    """A model cannot be loaded or run; the message names the model and what to do."""


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy by default; every field is recorded with the results."""
    max_new_tokens: int = 128
    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    num_beams: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def check(self) -> "GenerationSettings":
        if self.max_new_tokens < 1:
            raise ValueError(f"generation: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.do_sample and self.temperature <= 0:
            raise ValueError("generation: do_sample=True needs temperature > 0")
        return self


@dataclass
class Request:
    """One model call. `audio` is mono float32 at the adapter's sample rate, or None (text only)."""
    prompt: str
    audio: np.ndarray | None = None
    options: list[str] = field(default_factory=list)  # the replies scored by loglikelihood()
    system: str | None = None
    id: str = ""
    task: str = ""  # the harness task name; cascades answer scene_description without the reasoner


class Adapter:
    """Subclasses set `name` and implement `generate`; `loglikelihood` is optional.

    Class attributes the harness respects:
      sample_rate         audio is resampled to this before the call
      max_audio_seconds   longer audio is cut (and the sample marked) before the call
      uses_audio          False for text-only baselines: the audio probe is skipped for them
      supports_loglikelihood / prefers_loglikelihood   option scoring instead of parsing text
    """
    name = "adapter"
    version = 1  # bump when the adapter's outputs change for the same inputs (it keys the cache)
    sample_rate = 16000
    max_audio_seconds: float | None = None
    uses_audio = True
    supports_loglikelihood = False
    prefers_loglikelihood = False

    def __init__(self, **model_args):
        self.model_args = dict(model_args)

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        raise NotImplementedError

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        """Per request, one score per option (higher is more likely)."""
        raise AdapterError(f"{self.name}: this adapter cannot score options; use generation (--scoring generate)")

    def info(self) -> dict:
        """What identifies the model's outputs: recorded in results and part of the cache key."""
        return {"adapter": self.name, "version": self.version,
                "model_args": {k: str(v) for k, v in sorted(self.model_args.items())}}

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.info(), sort_keys=True).encode()).hexdigest()[:16]


def parse_model_args(text: str | None) -> dict:
    """`k=v,k2=v2` (lm-eval's --model_args) -> dict with ints, floats and booleans converted."""
    out: dict = {}
    if not text:
        return out
    for part in text.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"--model_args: {part!r} is not key=value")
        k, v = (s.strip() for s in part.split("=", 1))
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        else:
            for conv in (int, float):
                try:
                    out[k] = conv(v)
                    break
                except ValueError:
                    continue
            else:
                out[k] = v
    return out
