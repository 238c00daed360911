"""GPU check for the transformers adapters (run only on a lent GPU machine; ~5 min).

Weights cannot be downloaded there either, so this is about speed and correctness, not
scores: the full-size Qwen2-Audio-7B and Qwen2.5-Omni-7B thinker architectures are built from
their published configs (values below, copied from the models' config.json) with random
bf16 weights, put behind the real adapters (their processors, chat templates, batching and
decoding), and run on CASU-mini questions with 30 s of real bank audio at batch sizes 1, 8
and 32. Reported: samples/s, peak GPU memory, and whether greedy outputs are identical
across batch sizes. The byte-level test tokenizer stands in for the real one (same
special-token structure), so prompts are longer in tokens than with the real vocabulary.

    python benchmarks/gpu_adapters.py [--size full|tiny] [--n 32] [--out bench_out/gpu_adapters.json]

`--size tiny` runs the same code on CPU with 2-layer models (a dry run of the script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# The random-weight configs and processors are test fixtures (tests/tiny_models.py), not package code.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

QWEN2_AUDIO_7B = {  # Qwen/Qwen2-Audio-7B-Instruct config.json
    "audio": dict(
        d_model=1280,
        encoder_layers=32,
        encoder_attention_heads=20,
        encoder_ffn_dim=5120,
        num_mel_bins=128,
        max_source_positions=1500,
    ),
    "text": dict(
        model_type="qwen2",
        vocab_size=156032,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
}
QWEN25_OMNI_7B_THINKER = {  # Qwen/Qwen2.5-Omni-7B config.json, thinker_config
    "audio": dict(
        d_model=1280,
        encoder_layers=32,
        encoder_attention_heads=20,
        encoder_ffn_dim=5120,
        num_mel_bins=128,
        max_source_positions=1500,
        n_window=100,
        output_dim=3584,
    ),
    "vision": dict(
        depth=32,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=3584,
        fullatt_block_indexes=[7, 15, 23, 31],
    ),
    "text": dict(
        model_type="qwen2_5_omni_text",
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    ),
}


def _requests(n: int, seconds: float = 30.0):
    """CASU-mini questions, each with 30 s of a real bank background plus an event."""
    from casu_dataset.contract import mcq_tasks
    from casu_dataset.core.audio_io import load_audio
    from casu_dataset.legacy.library import compile_library
    from casu_dataset.sounds.bank import bank_dir
    from harness.task.config import load_tasks
    from harness.task.prompts import build_prompt
    from model_adapters.base import Request

    tmpl = load_tasks()[mcq_tasks()[0]].prompt_template
    qs = [q for s in compile_library() for q in s.questions][:n]
    clips = sorted((bank_dir() / "audio").glob("ba__*.ogg"))[:n]  # background beds
    reqs = []
    for i, q in enumerate(qs):
        x = load_audio(clips[i % len(clips)])
        x = np.resize(x, int(seconds * 16000)).astype(np.float32) * 0.5
        reqs.append(
            Request(prompt=build_prompt(tmpl, q.question, q.options), audio=x, options=q.options, id=q.id)
        )
    return reqs


def _build(family: str, size: str, device: str):
    import tiny_models as tiny  # tests/tiny_models.py: configs and processors of the test checkpoints
    import torch
    import transformers
    from transformers import WhisperFeatureExtractor

    from model_adapters import get_adapter
    from model_adapters.audio_only import audio_only_processor

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    full = size == "full"
    if family == "qwen2-audio":
        proc = tiny.qwen2_audio_processor()
        tok = proc.tokenizer
        spec = QWEN2_AUDIO_7B
        cfg = tiny.qwen2_audio_config(
            tok,
            dict(spec["audio"]) if full else tiny._whisper_cfg(),
            dict(spec["text"]) if full else tiny._text_cfg(spec["text"]["vocab_size"]),
        )
        cls = transformers.Qwen2AudioForConditionalGeneration
    else:
        tok = tiny._omni_tokenizer()
        proc = audio_only_processor(
            transformers.Qwen2_5OmniProcessor,
            WhisperFeatureExtractor(feature_size=128),
            tok,
            tiny.QWEN_OMNI_TEMPLATE,
        )
        spec = QWEN25_OMNI_7B_THINKER
        if full:
            audio, vision, text = dict(spec["audio"]), dict(spec["vision"]), dict(spec["text"])
        else:
            audio, vision = tiny._whisper_cfg(**tiny.TINY_OMNI_AUDIO), tiny.TINY_OMNI_VISION
            text = tiny._text_cfg(spec["text"]["vocab_size"], rope_parameters=tiny.TINY_MROPE)
        cfg = tiny.qwen2_5_omni_thinker_config(tok, audio, vision, text)
        cls = transformers.Qwen2_5OmniThinkerForConditionalGeneration
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(cfg).eval()
    finally:
        torch.set_default_dtype(prev)
    # The weights exist only in memory (random, never saved): the adapter wraps them and runs
    # its real processor -> generate -> decode path.
    adapter = get_adapter(family).from_loaded(
        model, proc, pretrained=f"random-{size}-{family}", device=device
    )
    n_params = sum(p.numel() for p in model.parameters())
    return adapter, n_params


def run(size: str = "full", n: int = 32, batch_sizes=(1, 8, 32), max_new_tokens: int = 16) -> dict:
    import torch

    from model_adapters.base import GenerationSettings

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if size == "full" and device != "cuda":
        raise SystemExit("gpu_adapters: --size full needs a GPU (use --size tiny for a CPU dry run)")
    reqs = _requests(n)
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    out = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "size": size,
        "n": len(reqs),
        "audio_s": 30.0,
        "max_new_tokens": max_new_tokens,
        "torch": torch.__version__,
        "models": {},
    }
    for family in ("qwen2-audio", "qwen2.5-omni"):
        t0 = time.perf_counter()
        adapter, n_params = _build(family, size, device)
        res = {"params": n_params, "build_s": time.perf_counter() - t0, "by_batch_size": {}}
        outputs = {}
        for bs in batch_sizes:
            if device == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            texts = []
            for i in range(0, len(reqs), bs):
                texts += adapter.generate(reqs[i : i + bs], settings)
            if device == "cuda":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            outputs[bs] = texts
            res["by_batch_size"][bs] = {
                "samples_per_s": len(reqs) / dt,
                "seconds": dt,
                "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            }
        base = outputs[batch_sizes[0]]
        res["identical_across_batch_sizes"] = all(outputs[b] == base for b in batch_sizes)
        res["n_differing"] = {b: sum(x != y for x, y in zip(outputs[b], base)) for b in batch_sizes}
        out["models"][family] = res
        del adapter
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["full", "tiny"], default="full")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--max_new_tokens", type=int, default=16)
    ap.add_argument("--out", default="bench_out/gpu_adapters.json")
    a = ap.parse_args()
    res = run(a.size, a.n, max_new_tokens=a.max_new_tokens)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
