"""Reference points: a seeded random chooser and a blind reasoner that never hears the audio."""
from __future__ import annotations

import hashlib

import numpy as np

from .base import Adapter, GenerationSettings, Request
from .cascade import Cascade
from .registry import register

LETTERS = "ABCDEFGHIJ"


@register("random")
class RandomBaseline(Adapter):
    """Seeded random letter per question (chance level); empty text for open-ended prompts."""
    uses_audio = False
    supports_loglikelihood = True

    def __init__(self, seed: int = 0):
        super().__init__(seed=seed)
        self.seed = int(seed)

    def _rng(self, req: Request) -> np.random.Generator:
        # Seeded by the request itself, so the draw never depends on batch order or size.
        h = hashlib.sha256(f"{self.seed}|{req.id}|{req.prompt}".encode()).digest()
        return np.random.default_rng(int.from_bytes(h[:8], "little"))

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        return [f"Answer: {LETTERS[self._rng(r).integers(len(r.options))]}" if r.options else "" for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        return [list(self._rng(r).random(len(r.options))) for r in requests]


@register("blind")
class BlindBaseline(Cascade):
    """The cascade's reasoner with the question only (no transcript, no caption, no audio)."""
    uses_audio = False

    def __init__(self, **kw):
        kw.setdefault("transcriber", "none")
        super().__init__(**kw)
        if self.transcriber_name != "none" or self.captioner_name:
            raise ValueError("blind: the blind baseline takes no transcriber or captioner")
