"""The base of the transformers audio language models (`HFAudioLM`): loading (dtype, quantization,
revision, chat template), batching and decoding. The families (Qwen2-Audio, Qwen2.5/3-Omni,
Audio Flamingo 3, Phi-4-multimodal, Voxtral) are in model_adapters/hf_models.py; a family only
says which model class and processor it uses and how a request becomes a conversation.
transformers and torch are imported when a model is loaded, never at import time.

Batches are left-padded with attention masks and decoded greedily (`do_sample=False`,
`num_beams=1`), so a sample's output does not depend on what it is batched with (tested
with tiny random models in tests/test_adapters.py).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from model_adapters.base import Adapter, AdapterError, GenerationSettings, Request


def _torch_dtype(name: str, device: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    try:
        return getattr(torch, name)
    except AttributeError:
        raise AdapterError(
            f"--model_args dtype={name!r}: not a torch dtype (float32, bfloat16, float16, auto)"
        ) from None


def load_chat_template(path: str, tokenizer, revision: str | None = None) -> str | dict | None:
    """The checkpoint's chat template; a dict {name: template} when it has named ones
    (`additional_chat_templates/NAME.jinja`, which the tokenizer loads), as transformers' processors
    keep them."""
    import json

    from transformers.utils import cached_file

    own = getattr(tokenizer, "chat_template", None)
    for fname in ("chat_template.jinja", "chat_template.json"):
        f = cached_file(path, fname, _raise_exceptions_for_missing_entries=False, revision=revision)
        if f:
            text = open(f, encoding="utf-8").read()
            text = json.loads(text)["chat_template"] if fname.endswith(".json") else text
            return {**own, "default": text} if isinstance(own, dict) else text
    return own


class HFAudioLM(Adapter):
    """Base for transformers audio LMs; subclasses set the class names and the conversation."""

    sampling_settings = frozenset({"top_p", "top_k"})  # passed to generate() when sampling
    default_model = ""
    model_class = ""
    supports_loglikelihood = True
    system_prompt: str | None = None
    max_audio_seconds = 30.0
    positions_from_mask = True  # False where the model derives (multimodal) positions itself
    group_by_audio_length = False  # True where the audio encoder does not mask padded frames
    chat_template_use = "always"
    chat_template_how = (
        "always uses the model's chat template (its audio placeholder comes from it); a NAME picks "
        "one of the processor's named templates"
    )

    # lm-eval HFLM / transformers keys this loader does not pass on: refused by name
    refused_args = {
        "peft": (
            "adapters are not loaded; merge the PEFT weights into a checkpoint and give it as pretrained="
        ),
        "delta": "delta weights are not applied; give the merged checkpoint as pretrained=",
        "gptq": (
            "GPTQ checkpoints load through their own quantization_config: give pretrained= of a GPTQ repo"
        ),
        "autogptq": "AutoGPTQ is not used; give pretrained= of a GPTQ repo (transformers reads its config)",
        "parallelize": "use device_map=auto to spread a model over GPUs",
        "max_memory_per_gpu": "not passed to from_pretrained; use device_map=auto",
        "max_cpu_memory": "not passed to from_pretrained; use device_map=auto",
        "offload_folder": "not passed to from_pretrained",
        "subfolder": "not passed to the processor; give the subfolder's path as pretrained=",
        "tokenizer": "the processor comes from pretrained= (its tokenizer and feature extractor together)",
        "use_fast_tokenizer": "the processor's own tokenizer is used",
        "add_bos_token": "the chat template decides the special tokens",
        "max_length": "audio requests are not truncated by tokens; use --gen_kwargs max_new_tokens=N",
        "backend": "the model class is fixed by --model",
        "torch_dtype": "use dtype= (transformers 5 renamed it)",
        "quantization_config": "use load_in_4bit=true or load_in_8bit=true (bitsandbytes)",
    }
    ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
    BNB_QUANT_TYPES = ("nf4", "fp4")

    def __init__(
        self,
        pretrained: str | None = None,
        dtype: str = "auto",
        device: str | None = None,
        device_map: str | None = None,
        attn_implementation: str | None = None,
        trust_remote_code: bool = False,
        system_prompt: str | None = None,
        revision: str | None = None,
        load_in_4bit: bool = False,
        load_in_8bit: bool = False,
        bnb_4bit_compute_dtype: str | None = None,
        bnb_4bit_quant_type: str | None = None,
        bnb_4bit_use_double_quant: bool = False,
    ):
        """Every argument reaches the loader: `revision` (a Hub branch, tag or commit; recorded with
        the commit it resolved to as model_sha), `load_in_4bit` / `load_in_8bit` and the `bnb_4bit_*`
        options (a bitsandbytes quantization_config), `attn_implementation`, `device_map`, `dtype`.
        Any other key is refused by name (ModelArgsError) before the weights load."""
        from model_adapters.base import ModelArgsError

        extra = {
            k: v
            for k, v in dict(
                revision=revision,
                load_in_4bit=load_in_4bit,
                load_in_8bit=load_in_8bit,
                bnb_4bit_compute_dtype=bnb_4bit_compute_dtype,
                bnb_4bit_quant_type=bnb_4bit_quant_type,
                bnb_4bit_use_double_quant=bnb_4bit_use_double_quant,
            ).items()
            if v not in (None, False)
        }  # only when given, so a run without them keeps the fingerprint recorded for it
        super().__init__(
            pretrained=pretrained or self.default_model,
            dtype=dtype,
            device=device,
            device_map=device_map,
            attn_implementation=attn_implementation,
            **extra,
        )
        self.pretrained = pretrained or self.default_model
        self.device = device or ("cuda" if _cuda() else "cpu")
        self.dtype_name = dtype
        self.device_map = device_map
        self.attn_implementation = attn_implementation
        self.trust_remote_code = trust_remote_code
        self.revision = revision
        if revision is not None and (
            not revision.strip() or os.path.isdir(os.path.expanduser(self.pretrained))
        ):
            raise ModelArgsError(
                f"bad --model_args revision={revision!r}: "
                + (
                    "empty"
                    if not revision.strip()
                    else f"pretrained={self.pretrained} is a local folder, which has no revisions; give the "
                    "Hub repo id (its revision is taken from the Hub cache) or drop revision="
                )
            )
        if attn_implementation is not None and attn_implementation not in self.ATTN_IMPLEMENTATIONS:
            raise ModelArgsError(
                f"bad --model_args attn_implementation={attn_implementation!r}: "
                f"{self.name} takes {', '.join(self.ATTN_IMPLEMENTATIONS)}"
            )
        if load_in_4bit and load_in_8bit:
            raise ModelArgsError("bad --model_args load_in_4bit=true,load_in_8bit=true: choose one")
        bnb4 = {
            "bnb_4bit_compute_dtype": bnb_4bit_compute_dtype,
            "bnb_4bit_quant_type": bnb_4bit_quant_type,
            "bnb_4bit_use_double_quant": bnb_4bit_use_double_quant or None,
        }
        given4 = [k for k, v in bnb4.items() if v is not None]
        if given4 and not load_in_4bit:
            raise ModelArgsError(f"bad --model_args {given4[0]}: only with load_in_4bit=true")
        if bnb_4bit_quant_type is not None and bnb_4bit_quant_type not in self.BNB_QUANT_TYPES:
            raise ModelArgsError(f"bad --model_args bnb_4bit_quant_type={bnb_4bit_quant_type!r}: nf4 or fp4")
        if bnb_4bit_compute_dtype is not None and bnb_4bit_compute_dtype not in (
            "float32",
            "bfloat16",
            "float16",
        ):
            raise ModelArgsError(
                f"bad --model_args bnb_4bit_compute_dtype={bnb_4bit_compute_dtype!r}: float32, "
                "bfloat16 or float16"
            )
        self.quantization = None
        if load_in_4bit or load_in_8bit:
            import importlib.util

            key = "load_in_4bit" if load_in_4bit else "load_in_8bit"
            if importlib.util.find_spec("bitsandbytes") is None:
                raise ModelArgsError(
                    f"bad --model_args {key}=true: needs bitsandbytes (pip install bitsandbytes; "
                    "CUDA GPUs), which is not installed"
                )
            self.quantization = {key: True, **{k: v for k, v in bnb4.items() if v is not None}}
        if system_prompt is not None:
            self.system_prompt = system_prompt or None
        # loaded on first use; their transformers classes are named by the subclass (model_class,
        # processor_class), so their static type is open
        self._model: Any = None
        self._processor: Any = None

    @classmethod
    def from_loaded(cls, model, processor, **model_args) -> "HFAudioLM":
        """An adapter around a model and processor already in memory (e.g. random weights built
        from a config for a benchmark): the same processor -> generate -> decode path, no loading.
        `model_args` are recorded as for a loaded model (give `pretrained` a name that says what it is)."""
        self = cls(**model_args)
        self._processor = processor
        self._model = model.eval()
        self._tokenizer.padding_side = "left"
        return self

    # -- loading ------------------------------------------------------------------------
    def load_processor(self, path: str):
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(path, trust_remote_code=self.trust_remote_code, **self._hub_kw())

    def load_model(self, path: str, **kw):
        import transformers

        cls = getattr(transformers, self.model_class)
        return cls.from_pretrained(path, **kw)

    def _load(self):
        if self._model is not None:
            return
        kw = {"dtype": _torch_dtype(self.dtype_name, self.device), **self._hub_kw()}
        if self.device_map:
            kw["device_map"] = self.device_map
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        if self.quantization:
            from transformers import BitsAndBytesConfig

            q = dict(self.quantization)
            if q.get("bnb_4bit_compute_dtype"):
                q["bnb_4bit_compute_dtype"] = _torch_dtype(q["bnb_4bit_compute_dtype"], self.device)
            kw["quantization_config"] = BitsAndBytesConfig(**q)
        try:
            self._load_processor()
            model = self.load_model(self.pretrained, **kw)
        except (OSError, ValueError) as err:
            raise self._load_error(err) from None
        if not self.device_map and not self.quantization:  # bitsandbytes places the weights itself
            model.to(self.device)
        model.eval()
        self._model = model
        self._tokenizer.padding_side = "left"

    def _hub_kw(self) -> dict:
        """The keywords every from_pretrained call of this checkpoint takes (the revision)."""
        return {"revision": self.revision} if self.revision else {}

    def model_meta(self) -> dict:
        if self._model is None:
            return {}
        params = list(self._model.parameters())
        cfg = getattr(self._model, "config", None)
        return {
            "model_num_parameters": int(sum(p.numel() for p in params)),
            "model_dtype": str(params[0].dtype) if params else None,
            "model_revision": self.revision or "main",
            # the commit the revision resolved to in the Hub cache; None for a local folder
            "model_sha": self._commit_sha() or getattr(cfg, "_commit_hash", None),
        }

    def _commit_sha(self) -> str | None:
        """The commit of the loaded files: the Hub cache's snapshot folder the revision points to
        (`hf download` and from_pretrained leave `snapshots/<sha>/`); None for a local folder."""
        if os.path.isdir(os.path.expanduser(self.pretrained)):
            return None
        try:
            from huggingface_hub import try_to_load_from_cache

            f = try_to_load_from_cache(self.pretrained, "config.json", revision=self.revision)
        except Exception:  # noqa: BLE001 - informational: a bad id already failed to load
            return None
        if isinstance(f, str) and os.path.basename(os.path.dirname(os.path.dirname(f))) == "snapshots":
            return os.path.basename(os.path.dirname(f))
        return None

    def chat_template_text(self) -> str | None:
        if self._processor is None:
            return None
        t = getattr(self._processor, "chat_template", None) or getattr(self._tokenizer, "chat_template", None)
        if isinstance(t, dict):
            t = t.get(self.chat_template_name or "default")
        return t if isinstance(t, str) else None

    def tokenizer_info(self) -> dict:
        tok = self._tokenizer if self._processor is not None else None
        if tok is None or not hasattr(tok, "eos_token"):
            return {}
        return {
            "tokenizer_pad_token": [str(tok.pad_token), str(tok.pad_token_id)],
            "tokenizer_eos_token": [str(tok.eos_token), str(tok.eos_token_id)],
            "tokenizer_bos_token": [str(tok.bos_token), str(tok.bos_token_id)],
            "eot_token_id": tok.eos_token_id,
            "max_length": self._max_length(tok),
        }

    def _max_length(self, tok) -> int | None:
        """lm-eval's max_length: the model's context (max_position_embeddings of its text config),
        else the tokenizer's model_max_length when it is a real limit (not transformers' 1e30 sentinel)."""
        cfg = getattr(self._model, "config", None)
        for c in (getattr(cfg, "text_config", None), getattr(cfg, "get_text_config", lambda: None)(), cfg):
            n = getattr(c, "max_position_embeddings", None)
            if isinstance(n, int) and n > 0:
                return n
        n = getattr(tok, "model_max_length", None)
        return n if isinstance(n, int) and 0 < n < 10**9 else None

    def _load_processor(self):
        """The processor alone (tokenizer, chat templates, feature extractor): no weights."""
        if self._processor is None:
            try:
                self._processor = self.load_processor(self.pretrained)
            except (OSError, ValueError) as err:
                raise self._load_error(err) from None
        return self._processor

    def _load_error(self, err: Exception) -> AdapterError:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        msg = str(err).splitlines()[0][:300]
        return AdapterError(
            f"--model {self.name}: cannot load {self.pretrained!r} ({type(err).__name__}: {msg}). "
            f"Give a local folder with --model_args pretrained=PATH, or download the weights first"
            f"{' (HF_HUB_OFFLINE=1 is set, so nothing is fetched)' if offline else ''}."
        )

    def chat_template_names(self) -> list[str]:
        proc = self._load_processor()
        templates = getattr(proc, "chat_template", None)
        if templates is None:  # a processor that keeps its template on the tokenizer only
            templates = getattr(self._tokenizer, "chat_template", None)
        return sorted(k for k in templates if k != "default") if isinstance(templates, dict) else []

    @property
    def _tokenizer(self):
        return getattr(self._processor, "tokenizer", self._processor)

    @property
    def model_device(self):
        return next(self._model.parameters()).device

    def info(self) -> dict:
        d = super().info()
        d.update(model_class=self.model_class, pretrained=self.pretrained, dtype=self.dtype_name)
        return d

    # -- prompts ------------------------------------------------------------------------
    def conversation(self, req: Request) -> list[dict]:
        content = ([{"type": "audio", "audio": "<audio>"}] if req.audio is not None else []) + [
            {"type": "text", "text": req.prompt}
        ]
        system = req.system if req.system is not None else self.system_prompt
        sys_msg = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
        return sys_msg + [{"role": "user", "content": content}]

    def prompt_text(self, req: Request) -> str:
        named = {"chat_template": self.chat_template_name} if self.chat_template_name else {}
        return self._processor.apply_chat_template(
            self.conversation(req), add_generation_prompt=True, tokenize=False, **named
        )

    def encode(self, texts: list[str], audios: list[np.ndarray | None]):
        kw: dict[str, Any] = {
            "text": texts,
            "return_tensors": "pt",
            "text_kwargs": {"padding": True, "padding_side": "left"},
        }
        present = [a for a in audios if a is not None]
        if present:
            if len(present) != len(audios):
                raise AdapterError(f"{self.name}: a batch mixes requests with and without audio")
            kw.update(audio=present, sampling_rate=self.sample_rate)
        return self._processor(**kw)

    def _to_device(self, batch):
        import torch

        model_dtype = next(self._model.parameters()).dtype
        out = {}
        for k, v in batch.items():
            if isinstance(v, torch.Tensor):
                v = v.to(self.model_device)
                if v.is_floating_point():
                    v = v.to(model_dtype)
            out[k] = v
        return out

    def inputs(self, requests: list[Request]):
        return self._to_device(
            self.encode([self.prompt_text(r) for r in requests], [r.audio for r in requests])
        )

    # -- calls --------------------------------------------------------------------------
    def generation_model(self):
        return self._model

    def _grouped(self, requests: list[Request], fn) -> list:
        """Run `fn` on sub-batches of equal audio length where padding would change the encoding."""
        if not self.group_by_audio_length:
            return fn(requests)
        groups: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(-1 if r.audio is None else len(r.audio), []).append(i)
        out: list = [None] * len(requests)
        for idx in groups.values():
            for i, res in zip(idx, fn([requests[i] for i in idx])):
                out[i] = res
        return out

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        self._load()
        return self._grouped(requests, lambda reqs: self._generate(reqs, settings))

    def _generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        batch = self.inputs(requests)
        tok = self._tokenizer
        gen: dict[str, Any] = dict(
            max_new_tokens=settings.max_new_tokens, do_sample=settings.do_sample, num_beams=settings.num_beams
        )
        if settings.do_sample:
            gen.update(temperature=settings.temperature, top_p=settings.top_p)
            if settings.top_k is not None:
                gen["top_k"] = settings.top_k
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out = self.generation_model().generate(**batch, **gen, pad_token_id=pad)
        n = batch["input_ids"].shape[1]
        return [tok.decode(o[n:], skip_special_tokens=True).strip() for o in out]

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        """Sum of log-probabilities of each option's tokens after the prompt.

        Each (request, option) is one row of a left-padded batch: prompt + option, with the
        option's tokens at the end, so their positions are found without re-tokenising."""
        self._load()
        return self._grouped(requests, self._loglikelihood)

    def _loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        import torch

        tok = self._tokenizer
        rows, texts, audios = [], [], []
        for i, r in enumerate(requests):
            if not r.options:
                raise AdapterError(f"{self.name}: loglikelihood request {r.id!r} has no options")
            p = self.prompt_text(r)
            for o in r.options:
                n_opt = len(tok(o, add_special_tokens=False)["input_ids"])
                rows.append((i, n_opt))
                texts.append(p + o)
                audios.append(r.audio)
        batch = self._to_device(self.encode(texts, audios))
        if self.positions_from_mask:
            # Plain forward passes (unlike generate) number positions from 0 even under left padding.
            batch["position_ids"] = (batch["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            logits = self._model(**batch).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        ids = batch["input_ids"][:, 1:]
        scores: list[list[float]] = [[] for _ in requests]
        for row, (i, n_opt) in enumerate(rows):
            lp = logp[row, -n_opt:].gather(1, ids[row, -n_opt:, None]).sum().item()
            scores[i].append(float(lp))
        return scores


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False
