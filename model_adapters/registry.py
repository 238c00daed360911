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
    return cls, check_model_args(cls, name, args)


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
