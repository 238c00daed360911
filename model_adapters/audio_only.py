"""Build multimodal processors for audio-only use, without torchvision."""

from __future__ import annotations


def audio_only_processor(
    cls, feature_extractor, tokenizer, chat_template=None, audio_slot="feature_extractor"
):
    """A multimodal processor (Qwen2.5-Omni, Qwen3-Omni, Phi-4-MM) without torchvision.

    Their constructors insist on image (and video) processors, which need torchvision, and
    torchvision cannot load beside the CPU torch. Audio-only use never calls them, so
    placeholders are accepted in those slots only."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )
    from transformers.video_processing_utils import BaseVideoProcessor

    visual = {"image_processor": Qwen2VLImageProcessorPil(), "video_processor": BaseVideoProcessor()}
    visual = {k: v for k, v in visual.items() if k in cls.get_attributes()}

    class AudioOnly(cls):
        def check_argument_for_proper_class(self, name, arg):
            if name in visual:
                return type(arg)
            return super().check_argument_for_proper_class(name, arg)

    AudioOnly.__name__ = cls.__name__
    kw = {"chat_template": chat_template} if chat_template is not None else {}
    return AudioOnly(**visual, **{audio_slot: feature_extractor}, tokenizer=tokenizer, **kw)
