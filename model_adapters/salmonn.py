"""SALMONN (Tang et al., 2024) from the official code, which is not in transformers.

Clone https://github.com/bytedance/SALMONN, fetch its checkpoints as its README says, and
point the adapter at the checkout: `--model_args salmonn_path=DIR[,cfg_path=FILE]` or the
SALMONN_PATH environment variable. The adapter follows the checkout's `cli_inference.py`:
Whisper features + raw waveform in, the `<Speech><SpeechHere></Speech>` prompt template.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from model_adapters.base import Adapter, AdapterError, GenerationSettings, Request

PROMPT_TEMPLATE = "USER: <Speech><SpeechHere></Speech> {}\nASSISTANT:"


def salmonn_prompt(req: Request) -> str:
    """The official template; a system instruction goes first, as in Vicuna's (SALMONN's LLM) format."""
    text = PROMPT_TEMPLATE.format(req.prompt)
    return f"{req.system}\n{text}" if req.system else text


class Salmonn(Adapter):
    """SALMONN-13B/7B from an official checkout (salmonn_path=DIR or SALMONN_PATH)."""

    name = "salmonn"
    max_audio_seconds = 30.0
    chat_template_use = "always"
    chat_template_how = (
        "always uses SALMONN's own prompt format (USER: <Speech>... ASSISTANT:; no named templates)"
    )

    def __init__(self, salmonn_path: str | None = None, cfg_path: str | None = None, device: str = "cuda"):
        super().__init__(salmonn_path=salmonn_path, cfg_path=cfg_path)
        root = salmonn_path or os.environ.get("SALMONN_PATH")
        if not root:
            raise AdapterError(
                "--model salmonn: no checkout given; clone https://github.com/bytedance/SALMONN and "
                "pass --model_args salmonn_path=DIR (or set SALMONN_PATH)"
            )
        self.root = Path(root)
        if not (self.root / "models" / "salmonn.py").is_file():
            raise AdapterError(
                f"--model salmonn: {self.root} is not a SALMONN checkout (models/salmonn.py missing)"
            )
        self.cfg_path = Path(cfg_path) if cfg_path else self.root / "configs" / "decode_config.yaml"
        if not self.cfg_path.is_file():
            raise AdapterError(f"--model salmonn: config {self.cfg_path} not found (cfg_path=FILE)")
        self.device = device
        self._model: Any = None  # the SALMONN checkout's model class, imported at load time

    def _load(self):
        if self._model is not None:
            return
        sys.path.insert(0, str(self.root))
        import argparse

        from config import Config  # the checkout's modules
        from models.salmonn import SALMONN
        from transformers import WhisperFeatureExtractor

        cfg = Config(argparse.Namespace(cfg_path=str(self.cfg_path), device=self.device, options=None))
        model = SALMONN.from_config(cfg.config.model).to(self.device).eval()
        self._cfg = cfg
        self._fe = WhisperFeatureExtractor.from_pretrained(cfg.config.model.whisper_path)
        self._model = model

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        import numpy as np
        import torch

        self._load()
        out = []
        gen_cfg = dict(
            self._cfg.config.generate,
            max_new_tokens=settings.max_new_tokens,
            do_sample=settings.do_sample,
            num_beams=settings.num_beams,
        )
        for r in requests:  # the official code runs one sample at a time
            audio = r.audio if r.audio is not None else np.zeros(self.sample_rate, np.float32)
            audio = np.pad(audio, (0, max(0, self.sample_rate - len(audio))))[: self.sample_rate * 30]
            samples = {
                "spectrogram": self._fe(audio, sampling_rate=self.sample_rate, return_tensors="pt")[
                    "input_features"
                ],
                "raw_wav": torch.from_numpy(audio).unsqueeze(0),
                "padding_mask": torch.zeros(len(audio), dtype=torch.bool).unsqueeze(0),
            }
            samples = {k: v.to(self.device) for k, v in samples.items()}
            with torch.autocast(self.device.split(":")[0], dtype=torch.float16):
                text = self._model.generate(samples, gen_cfg, prompts=[salmonn_prompt(r)])[0]
            out.append(text.strip())
        return out
