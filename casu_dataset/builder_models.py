"""The builder's models the harness scores with: the retrieval's sentence embedder and the speech
layer's Whisper transcriber with its transcript normaliser and WER. Each is imported only when
its function is called, so importing this module is free; `harness/` and `model_adapters/` reach
the speech and sounds stages only through here (tests/test_contract.py)."""

from __future__ import annotations


def sentence_embedder(model: str | None = None, device: str = "cpu"):
    """The retrieval's sentence embedder (casu_dataset.sounds.retrieval.Embedder; sentence-transformers)."""
    from casu_dataset.sounds.retrieval import Embedder

    return Embedder(model, device=device)


def whisper_checker(model_path: str | None = None, device: str = "cpu"):
    """The speech layer's Whisper transcriber (casu_dataset.speech.intelligibility.WhisperChecker;
    faster-whisper). RuntimeError when the model cannot be loaded."""
    from casu_dataset.speech.intelligibility import WhisperChecker

    return WhisperChecker(model_path, device=device)


def normalize_transcript(text: str) -> str:
    """Whisper's English normaliser, as the speech layer's intelligibility check applies it."""
    from casu_dataset.speech.intelligibility import normalize

    return normalize(text)


def word_error_rate(reference: str, hypothesis: str) -> float:
    """WER of `hypothesis` against `reference`, both normalised (jiwer); ValueError on an empty reference."""
    from casu_dataset.speech.intelligibility import wer

    return wer(reference, hypothesis)
