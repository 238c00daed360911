"""Random-weight checkpoints of each supported architecture, built offline from configs.

Test fixtures (moved out of the installed package): tests and benchmarks/gpu_adapters.py use them
to run an adapter's real path (folder -> processor -> generate -> decode) without downloading
weights. `size="tiny"` is 2 layers and a byte-level vocabulary (seconds on CPU); random weights
produce arbitrary text, so they test plumbing, batching and determinism, never audio understanding.
"""

from __future__ import annotations

from pathlib import Path

QWEN_SPECIALS = {
    "audio_token": "<|AUDIO|>",
    "audio_bos_token": "<|audio_bos|>",
    "audio_eos_token": "<|audio_eos|>",
    "image_token": "<|IMAGE|>",
    "video_token": "<|VIDEO|>",
    "vision_bos_token": "<|vision_bos|>",
    "vision_eos_token": "<|vision_eos|>",
}

# Chat templates with the same structure and audio placeholders as the published ones
# (shortened: no tool calling, no system-prompt variants).
QWEN_AUDIO_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'audio' %}Audio {{ loop.index }}: "
    "<|audio_bos|><|AUDIO|><|audio_eos|>\n{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor "
    "%}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_OMNI_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'audio' %}<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
AF3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'audio' %}<sound>{% endif %}{% endfor %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PHI4_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'audio' %}<|audio|>{% elif c['type'] == 'text' "
    "%}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def byte_tokenizer(specials: list[str], named: dict[str, str] | None = None, **kwargs):
    """A Qwen2 (byte-level BPE) tokenizer with the 256 byte symbols and no merges."""
    from tokenizers import AddedToken
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import Qwen2Tokenizer

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], extra_special_tokens=dict(named or {}), **kwargs)
    tok.add_tokens([AddedToken(s, special=True) for s in specials], special_tokens=True)
    return tok


def _text_cfg(vocab: int, model_type: str = "qwen2", **kw) -> dict:
    return dict(
        model_type=model_type,
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        **kw,
    )


def _whisper_cfg(**kw) -> dict:
    return dict(
        d_model=32, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64, num_mel_bins=128, **kw
    )


def _save(model, processor, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def qwen2_audio_processor():
    """A Qwen2-Audio processor on the byte-level tokenizer, with the model's chat structure."""
    from transformers import Qwen2AudioProcessor, WhisperFeatureExtractor

    tok = byte_tokenizer(
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"]
    )
    return Qwen2AudioProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=128),
        tokenizer=tok,
        chat_template=QWEN_AUDIO_TEMPLATE,
    )


def qwen2_audio_config(tok, audio: dict, text: dict):
    from transformers import Qwen2AudioConfig

    return Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>")
    )


def build_qwen2_audio(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen2AudioForConditionalGeneration

    proc = qwen2_audio_processor()
    cfg = qwen2_audio_config(
        proc.tokenizer, _whisper_cfg(), _text_cfg(len(proc.tokenizer), initializer_range=0.2)
    )
    torch.manual_seed(seed)
    return _save(Qwen2AudioForConditionalGeneration(cfg).eval(), proc, Path(out))


def _save_parts(model, tokenizer, feature_extractor, chat_template: str, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    feature_extractor.save_pretrained(out)
    (out / "chat_template.jinja").write_text(chat_template)
    return out


def _omni_tokenizer():
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *QWEN_SPECIALS.values()]
    return byte_tokenizer(specials, named=QWEN_SPECIALS)


def _omni_ids(tok) -> dict:
    c = tok.convert_tokens_to_ids
    return dict(
        audio_token_id=c("<|AUDIO|>"),
        image_token_id=c("<|IMAGE|>"),
        video_token_id=c("<|VIDEO|>"),
        audio_start_token_id=c("<|audio_bos|>"),
        audio_end_token_id=c("<|audio_eos|>"),
        vision_start_token_id=c("<|vision_bos|>"),
    )


TINY_OMNI_AUDIO = dict(output_dim=32, n_window=50)
TINY_OMNI_VISION = dict(
    depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, fullatt_block_indexes=[0]
)
TINY_MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}


def qwen2_5_omni_thinker_config(tok, audio: dict, vision: dict, text: dict):
    """A Qwen2.5-Omni thinker config whose special-token ids are the tokenizer's."""
    from transformers import Qwen2_5OmniThinkerConfig

    ids = _omni_ids(tok)
    return Qwen2_5OmniThinkerConfig(
        audio_config=audio,
        vision_config=vision,
        text_config=dict(text, model_type="qwen2_5_omni_text"),
        audio_token_index=ids["audio_token_id"],
        image_token_index=ids["image_token_id"],
        video_token_index=ids["video_token_id"],
        audio_start_token_id=ids["audio_start_token_id"],
        audio_end_token_id=ids["audio_end_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        user_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
    )


def build_qwen2_5_omni(out: Path, seed: int = 0) -> Path:
    """The thinker alone (text output), saved as a Qwen2_5OmniThinkerForConditionalGeneration."""
    import torch
    from transformers import (
        Qwen2_5OmniThinkerForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    tok = _omni_tokenizer()
    cfg = qwen2_5_omni_thinker_config(
        tok,
        _whisper_cfg(**TINY_OMNI_AUDIO),
        TINY_OMNI_VISION,
        _text_cfg(len(tok), initializer_range=0.2, rope_parameters=TINY_MROPE),
    )
    torch.manual_seed(seed)
    return _save_parts(
        Qwen2_5OmniThinkerForConditionalGeneration(cfg).eval(),
        tok,
        WhisperFeatureExtractor(feature_size=128),
        QWEN_OMNI_TEMPLATE,
        Path(out),
    )


def build_qwen3_omni(out: Path, seed: int = 0) -> Path:
    """The Qwen3-Omni-MoE thinker (text output) with 4 experts of which 2 are routed."""
    import torch
    from transformers import (
        Qwen3OmniMoeThinkerConfig,
        Qwen3OmniMoeThinkerForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    tok = _omni_tokenizer()
    ids = _omni_ids(tok)
    cfg = Qwen3OmniMoeThinkerConfig(
        audio_config=_whisper_cfg(output_dim=32, downsample_hidden_size=16),
        vision_config=dict(
            depth=1,
            hidden_size=16,
            intermediate_size=32,
            num_heads=2,
            out_hidden_size=32,
            deepstack_visual_indexes=[0],
        ),
        text_config=dict(
            _text_cfg(len(tok), model_type="qwen3_omni_moe_text", initializer_range=0.2),
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            head_dim=16,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 3, 3],
                "interleaved": True,
            },
        ),
        audio_token_id=ids["audio_token_id"],
        image_token_id=ids["image_token_id"],
        video_token_id=ids["video_token_id"],
        audio_start_token_id=ids["audio_start_token_id"],
        vision_start_token_id=ids["vision_start_token_id"],
        user_token_id=tok.convert_tokens_to_ids("<|im_start|>"),
    )
    torch.manual_seed(seed)
    return _save_parts(
        Qwen3OmniMoeThinkerForConditionalGeneration(cfg).eval(),
        tok,
        WhisperFeatureExtractor(feature_size=128),
        QWEN_OMNI_TEMPLATE,
        Path(out),
    )


def build_audio_flamingo3(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
        AudioFlamingo3Processor,
        WhisperFeatureExtractor,
    )

    tok = byte_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<sound>"])
    proc = AudioFlamingo3Processor(
        feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tok, chat_template=AF3_TEMPLATE
    )
    cfg = AudioFlamingo3Config(
        audio_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
        text_config=_text_cfg(len(tok), initializer_range=0.2),
        audio_token_id=tok.convert_tokens_to_ids("<sound>"),
    )
    torch.manual_seed(seed)
    return _save(AudioFlamingo3ForConditionalGeneration(cfg).eval(), proc, Path(out))


def build_phi4_multimodal(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import (
        Phi4MultimodalConfig,
        Phi4MultimodalFeatureExtractor,
        Phi4MultimodalForCausalLM,
    )

    specials = {"image_token": "<|image|>", "audio_token": "<|audio|>"}
    tok = byte_tokenizer(
        ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>", *specials.values()], named=specials
    )
    c = tok.convert_tokens_to_ids
    cfg = Phi4MultimodalConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        initializer_range=0.2,
        bos_token_id=c("<|endoftext|>"),
        pad_token_id=c("<|endoftext|>"),
        eos_token_id=c("<|end|>"),
        original_max_position_embeddings=4096,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_token_id=c("<|image|>"),
        ),
        audio_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_blocks=2,
            num_attention_heads=2,
            ext_pw_out_channel=32,
            depthwise_separable_out_channel=32,
            nemo_conv_channels=32,
            audio_token_id=c("<|audio|>"),
        ),
    )
    torch.manual_seed(seed)
    return _save_parts(
        Phi4MultimodalForCausalLM(cfg).eval(), tok, Phi4MultimodalFeatureExtractor(), PHI4_TEMPLATE, Path(out)
    )


_TEKKEN_SPECIALS = [
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
]


def tekken_file(path: Path) -> Path:
    """A byte-level Tekken tokenizer file (mistral-common, v7) with [AUDIO] at id 24 as in Voxtral."""
    import base64
    import json

    specials = (
        _TEKKEN_SPECIALS
        + [f"<SPECIAL_{i}>" for i in range(20, 24)]
        + [
            "[AUDIO]",
            "[BEGIN_AUDIO]",
            "[TRANSCRIBE]",
            "[ARGS]",
            "[CALL_ID]",
            "[THINK]",
            "[/THINK]",
            "<SPECIAL_31>",
        ]
    )
    data = {
        "config": {
            "pattern": (
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
            ),
            "num_vocab_tokens": 256,
            "default_vocab_size": 256 + len(specials),
            "default_num_special_tokens": len(specials),
            "version": "v7",
        },
        "vocab": [
            {"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": None}
            for i in range(256)
        ],
        "special_tokens": [{"rank": i, "token_str": s, "is_control": True} for i, s in enumerate(specials)],
        "audio": {
            "sampling_rate": 16000,
            "frame_rate": 12.5,
            "chunk_length_s": 30.0,
            "audio_encoding_config": {"num_mel_bins": 128, "hop_length": 160, "window_size": 400},
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def build_voxtral(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import (
        VoxtralConfig,
        VoxtralForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    out = Path(out)
    tekken_file(out / "tekken.json")
    n_vocab = 256 + 32
    cfg = VoxtralConfig(
        # The projector stacks 4 encoder frames, so intermediate_size must be 4 x hidden_size.
        audio_config=dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2),
        text_config=dict(
            model_type="llama",
            vocab_size=n_vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            initializer_range=0.2,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=11,
        ),
        audio_token_id=24,
    )
    torch.manual_seed(seed)
    VoxtralForConditionalGeneration(cfg).eval().save_pretrained(out)
    WhisperFeatureExtractor(feature_size=128).save_pretrained(out)
    return out
