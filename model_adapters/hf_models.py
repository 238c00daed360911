"""Audio language models from transformers, one class per family, each with its own chat template
and audio placeholder: Qwen2-Audio, Qwen2.5-Omni and Qwen3-Omni (thinker only), Audio Flamingo 3,
Phi-4-multimodal and Voxtral. Loading, batching and decoding are the base class's
(`HFAudioLM`, model_adapters/hf_base.py, re-exported here)."""

from __future__ import annotations

import base64

from casu_dataset.core.audio_io import wav_bytes
from model_adapters.base import AdapterError, Request
from model_adapters.hf_base import HFAudioLM, load_chat_template

__all__ = [
    "AudioFlamingo3",
    "HFAudioLM",
    "Phi4Multimodal",
    "Qwen25Omni",
    "Qwen2Audio",
    "Qwen3Omni",
    "Voxtral",
]


class Qwen2Audio(HFAudioLM):
    """Qwen2-Audio-7B-Instruct (audio encoder + Qwen2 LM); `<|AUDIO|>` placeholder; 30 s per clip."""

    name = "qwen2-audio"
    model_types = ("qwen2_audio",)
    default_model = "Qwen/Qwen2-Audio-7B-Instruct"
    model_class = "Qwen2AudioForConditionalGeneration"
    max_audio_seconds = 30.0


class _OmniThinker(HFAudioLM):
    """Omni models run through the thinker only: text output, no talker, greedy decoding."""

    full_class = ""
    processor_class = ""
    positions_from_mask = False  # M-RoPE positions come from the model's own get_rope_index
    system_prompt: str | None = (
        "You are Qwen, a virtual human developed by the Qwen Team, Alibaba Group, capable of "
        "perceiving auditory and visual inputs, as well as generating text and speech."
    )

    def load_processor(self, path: str):
        import transformers
        from transformers import AutoFeatureExtractor, AutoTokenizer

        from model_adapters.audio_only import audio_only_processor

        tok = AutoTokenizer.from_pretrained(path, **self._hub_kw())
        return audio_only_processor(
            getattr(transformers, self.processor_class),
            AutoFeatureExtractor.from_pretrained(path, **self._hub_kw()),
            tok,
            load_chat_template(path, tok, **self._hub_kw()),
        )

    def load_model(self, path: str, **kw):
        import transformers
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(path, **self._hub_kw())
        if cfg.model_type.endswith("_thinker"):
            return getattr(transformers, self.model_class).from_pretrained(path, **kw)
        # A full omni checkpoint: load it, then keep only the thinker (the talker makes speech).
        full = getattr(transformers, self.full_class).from_pretrained(path, **kw)
        return full.thinker


class Qwen25Omni(_OmniThinker):
    """Qwen2.5-Omni-7B thinker (text output only), with Qwen's default system prompt."""

    name = "qwen2.5-omni"
    model_types = ("qwen2_5_omni", "qwen2_5_omni_thinker")
    default_model = "Qwen/Qwen2.5-Omni-7B"
    model_class = "Qwen2_5OmniThinkerForConditionalGeneration"
    full_class = "Qwen2_5OmniForConditionalGeneration"
    processor_class = "Qwen2_5OmniProcessor"
    max_audio_seconds = 300.0


class Qwen3Omni(_OmniThinker):
    """Qwen3-Omni-30B-A3B-Instruct thinker (MoE, text output only)."""

    name = "qwen3-omni"
    model_types = ("qwen3_omni_moe", "qwen3_omni_moe_thinker")
    default_model = "Qwen/Qwen3-Omni-30B-A3B-Instruct"
    model_class = "Qwen3OmniMoeThinkerForConditionalGeneration"
    full_class = "Qwen3OmniMoeForConditionalGeneration"
    processor_class = "Qwen3OmniMoeProcessor"
    system_prompt = None
    max_audio_seconds = 600.0


class AudioFlamingo3(HFAudioLM):
    """NVIDIA Audio Flamingo 3 (transformers port); `<sound>` placeholder, 30 s windows up to 10 min."""

    name = "audio-flamingo-3"
    model_types = ("audioflamingo3",)
    default_model = "nvidia/audio-flamingo-3-hf"
    model_class = "AudioFlamingo3ForConditionalGeneration"
    max_audio_seconds = 600.0


class Phi4Multimodal(HFAudioLM):
    """Microsoft Phi-4-multimodal-instruct (native transformers class); `<|audio|>` placeholder."""

    name = "phi-4-multimodal"
    model_types = ("phi4_multimodal",)
    default_model = "microsoft/Phi-4-multimodal-instruct"
    model_class = "Phi4MultimodalForCausalLM"
    max_audio_seconds = 1800.0
    # Its conformer encoder sees batch padding (scores moved by ~0.05 nats, measured), so
    # clips of different lengths never share a forward pass.
    group_by_audio_length = True

    def load_processor(self, path: str):
        from transformers import (
            AutoFeatureExtractor,
            AutoTokenizer,
            Phi4MultimodalProcessor,
        )

        from model_adapters.audio_only import audio_only_processor

        tok = AutoTokenizer.from_pretrained(path, **self._hub_kw())
        return audio_only_processor(
            Phi4MultimodalProcessor,
            AutoFeatureExtractor.from_pretrained(path, **self._hub_kw()),
            tok,
            load_chat_template(path, tok, **self._hub_kw()),
            audio_slot="audio_processor",
        )


class Voxtral(HFAudioLM):
    """Mistral Voxtral (Mini 3B / Small 24B); mistral-common tokenizer, audio sent as WAV in the chat."""

    name = "voxtral"
    model_types = ("voxtral",)
    default_model = "mistralai/Voxtral-Mini-3B-2507"
    model_class = "VoxtralForConditionalGeneration"
    supports_loglikelihood = False  # the mistral-common chat encoder has no "prompt + fixed reply" form
    max_audio_seconds = 1800.0
    chat_template_how = (
        "always uses mistral-common's chat encoding (no named templates; before tokenizer v11 a "
        "system instruction leads the user turn, as a system message beside audio is refused)"
    )

    def chat_template_names(self) -> list[str]:
        return []  # mistral-common builds the chat itself; there is no Jinja template to choose

    def load_processor(self, path: str):
        try:
            import mistral_common  # noqa: F401
        except ImportError:
            raise AdapterError("--model voxtral needs mistral-common (pip install mistral-common)") from None
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(path, **self._hub_kw())

    def conversation(self, req: Request) -> list[dict]:
        content = []
        if req.audio is not None:
            content.append(
                {"type": "audio", "base64": base64.b64encode(wav_bytes(req.audio, self.sample_rate)).decode()}
            )
        system = req.system if req.system is not None else self.system_prompt
        prompt = req.prompt
        if system and req.audio is not None and not self._system_beside_audio():
            # mistral-common refuses a system message beside audio before tokenizer v11, so the
            # instruction leads the user turn instead of being dropped
            prompt, system = f"{system}\n\n{prompt}", None
        msgs = [{"role": "user", "content": content + [{"type": "text", "text": prompt}]}]
        return ([{"role": "system", "content": system}] if system else []) + msgs

    def _system_beside_audio(self) -> bool:
        try:
            version = self._tokenizer.tokenizer.instruct_tokenizer.tokenizer.version
            return int(str(version.value).lstrip("v")) >= 11
        except (AttributeError, ValueError):
            return False  # unknown: the form every version takes

    def inputs(self, requests: list[Request]):
        batch = self._processor.apply_chat_template(
            [self.conversation(r) for r in requests],
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
            processor_kwargs={"text_kwargs": {"padding": True}},
        )
        return self._to_device(batch)
