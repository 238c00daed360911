"""Every adapter name -> "module:Class", in this one table; a module is imported only when
one of its names is asked for, so `--model random` never imports torch or transformers.
Adapters defined outside this package are given as `package.module:Class` directly."""

from __future__ import annotations

import importlib

from model_adapters.base import (
    Adapter,
    AdapterError,
    ModelArgsError,
    check_model_args,
    parse_model_args,
)

MODELS = {
    "random": "model_adapters.baselines:RandomBaseline",
    "replay": "model_adapters.replay:Replay",
    "blind": "model_adapters.baselines:BlindBaseline",
    "cascade": "model_adapters.cascade:Cascade",
    "openai-audio": "model_adapters.openai_audio:OpenAIAudio",
    "qwen2-audio": "model_adapters.hf_models:Qwen2Audio",
    "qwen2.5-omni": "model_adapters.hf_models:Qwen25Omni",
    "qwen3-omni": "model_adapters.hf_models:Qwen3Omni",
    "audio-flamingo-3": "model_adapters.hf_models:AudioFlamingo3",
    "voxtral": "model_adapters.hf_models:Voxtral",
    "phi-4-multimodal": "model_adapters.hf_models:Phi4Multimodal",
    "salmonn": "model_adapters.salmonn:Salmonn",
}


def adapter_names() -> list[str]:
    return sorted(MODELS)


def _load(target: str, name: str) -> type[Adapter]:
    mod, _, cls_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(mod), cls_name)
    except (ImportError, AttributeError) as err:
        raise AdapterError(f"--model {name!r}: cannot import it ({err})") from None
    if not (isinstance(cls, type) and issubclass(cls, Adapter)):
        raise AdapterError(f"--model {name!r}: not a model_adapters.Adapter subclass")
    return cls


def get_adapter(name: str) -> type[Adapter]:
    """A registered name, or `package.module:Class` for an adapter defined outside this package."""
    if name in MODELS:
        return _load(MODELS[name], name)
    if ":" in name:
        return _load(name, name)
    raise AdapterError(
        f"--model {name!r}: unknown model; choose one of {', '.join(adapter_names())} "
        "(or module:Class for your own adapter)"
    )


def resolve_adapter(name: str, model_args: str | dict | None = None) -> tuple[type[Adapter], dict]:
    """The adapter class and its arguments, typed and range-checked by its signature; nothing loads."""
    if isinstance(model_args, str) or model_args is None:
        args = parse_model_args(model_args, raw=True)
    else:
        args = dict(model_args)
    cls = get_adapter(name)
    checked = check_model_args(cls, name, args)
    check_checkpoint(cls, name, checked)
    return cls, checked


def _checkpoint_config(pretrained: str, revision: str | None) -> dict | None:
    """The checkpoint's config.json: a local folder's, or a Hub id's from the local cache (never
    downloaded); None when there is none to read."""
    import json
    import os

    path = os.path.join(os.path.expanduser(pretrained), "config.json")
    if not os.path.isdir(os.path.expanduser(pretrained)):
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(pretrained, "config.json", revision=revision)
        except Exception:  # noqa: BLE001 - not a repo id: the load names it
            return None
        if not isinstance(found, str):
            return None
        path = found
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return None  # no or unreadable config.json: loading it names the problem
    return cfg if isinstance(cfg, dict) else None


def check_checkpoint(cls: type[Adapter], name: str, args: dict) -> None:
    """Refuse, before any weights load, a checkpoint made for another model family: its
    config.json `model_type` is not one the adapter loads. Names the adapter, the model type and
    the --model that loads it."""
    types = getattr(cls, "model_types", ())
    pretrained = args.get("pretrained") or getattr(cls, "default_model", None)
    if not types or not pretrained:
        return
    cfg = _checkpoint_config(str(pretrained), args.get("revision"))
    model_type = (cfg or {}).get("model_type")
    if not model_type or model_type in types:
        return
    fits = [n for n in adapter_names() if model_type in getattr(_peek(n), "model_types", ())]
    arch = ", ".join(cfg.get("architectures") or []) if cfg else ""
    hint = f"--model {fits[0]} loads it" if fits else "no CASU adapter loads this model type"
    raise ModelArgsError(
        f"--model {name}: pretrained={pretrained} is a {model_type!r} checkpoint"
        + (f" ({arch})" if arch else "")
        + f", and {name} loads {', '.join(repr(t) for t in types)}; {hint}"
    )


def _peek(name: str):
    """An adapter class, or None when its module cannot be imported here (an optional extra)."""
    try:
        return get_adapter(name)
    except Exception:  # noqa: BLE001 - only used to suggest which adapter fits
        return None


def instantiate(cls: type[Adapter], name: str, checked_args: dict) -> Adapter:
    """The adapter built from arguments that `resolve_adapter` checked."""
    try:
        return cls(**checked_args)
    except TypeError as err:
        raise ModelArgsError(f"--model {name}: bad --model_args ({err})") from None


def make_adapter(name: str, model_args: str | dict | None = None) -> Adapter:
    """The adapter, its arguments typed and range-checked by its signature before it loads."""
    cls, args = resolve_adapter(name, model_args)
    return instantiate(cls, name, args)


def describe(name: str) -> str:
    """First docstring line of the adapter class (imports its module)."""
    doc = (get_adapter(name).__doc__ or "").strip().splitlines()
    return doc[0] if doc else ""
