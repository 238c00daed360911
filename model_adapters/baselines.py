"""Reference points: a seeded random chooser and a blind reasoner that never hears the audio."""

from __future__ import annotations

import numpy as np

from casu_dataset.contract import LETTERS
from casu_dataset.core.rng import derive_rng
from model_adapters.base import Adapter, GenerationSettings, Request
from model_adapters.cascade import Cascade


class RandomBaseline(Adapter):
    """Seeded random letter per question (chance level); empty text for open-ended prompts."""

    name = "random"
    uses_audio = False
    supports_loglikelihood = True
    chat_template_how = (
        "renders no prompt at all (a seeded random letter; --system_instruction is ignored too)"
    )

    def __init__(self, seed: int = 0, device: str = "cpu"):
        super().__init__(seed=seed)  # device is not part of the fingerprint: the draws do not depend on it
        self.seed = int(seed)

    def _rng(self, req: Request) -> np.random.Generator:
        # Seeded by the request itself, so the draw never depends on batch order or size.
        return derive_rng(None, f"{self.seed}|{req.id}|{req.prompt}")

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        return [
            f"Answer: {LETTERS[self._rng(r).integers(len(r.options))]}" if r.options else "" for r in requests
        ]

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        return [list(self._rng(r).random(len(r.options))) for r in requests]


class BlindBaseline(Cascade):
    """The cascade's reasoner with the question only (no transcript, no caption, no audio)."""

    name = "blind"
    uses_audio = False

    def __init__(self, **kw):
        kw.setdefault("transcriber", "none")
        super().__init__(**kw)
        if self.transcriber_name != "none" or self.captioner_name:
            raise ValueError("blind: the blind baseline takes no transcriber or captioner")
