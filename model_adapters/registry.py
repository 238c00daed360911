"""Adapter names -> the module that defines them, imported only when the name is asked for.

Modules register their classes with `@register("name", ...)`; the table below tells
`get_adapter` which module to import for a name without importing any of the others."""
from __future__ import annotations

import importlib

from .base import Adapter, AdapterError, parse_model_args

_MODULES = {
    "random": "model_adapters.baselines",
    "blind": "model_adapters.baselines",
    "cascade": "model_adapters.cascade",
    "openai-audio": "model_adapters.openai_audio",
    "qwen2-audio": "model_adapters.hf_models",
    "qwen2.5-omni": "model_adapters.hf_models",
    "qwen3-omni": "model_adapters.hf_models",
    "audio-flamingo-3": "model_adapters.hf_models",
    "voxtral": "model_adapters.hf_models",
    "phi-4-multimodal": "model_adapters.hf_models",
    "salmonn": "model_adapters.salmonn",
}
_REGISTRY: dict[str, type[Adapter]] = {}


def register(*names: str):
    def deco(cls):
        for n in names:
            if n not in _MODULES:
                raise RuntimeError(f"adapter {n!r} is not listed in model_adapters.registry._MODULES")
            _REGISTRY[n] = cls
        cls.name = names[0]
        return cls
    return deco


def adapter_names() -> list[str]:
    return sorted(_MODULES)


def get_adapter(name: str) -> type[Adapter]:
    """A registered name, or `package.module:Class` for an adapter defined outside this package."""
    if ":" in name and name not in _MODULES:
        mod, _, cls_name = name.partition(":")
        try:
            cls = getattr(importlib.import_module(mod), cls_name)
        except (ImportError, AttributeError) as err:
            raise AdapterError(f"--model {name!r}: cannot import it ({err})") from None
        if not (isinstance(cls, type) and issubclass(cls, Adapter)):
            raise AdapterError(f"--model {name!r}: not a model_adapters.Adapter subclass")
        return cls
    if name not in _MODULES:
        raise AdapterError(f"--model {name!r}: unknown model; choose one of {', '.join(adapter_names())} "
                           "(or module:Class for your own adapter)")
    if name not in _REGISTRY:
        importlib.import_module(_MODULES[name])
    return _REGISTRY[name]


def make_adapter(name: str, model_args: str | dict | None = None) -> Adapter:
    args = parse_model_args(model_args) if isinstance(model_args, str) or model_args is None else dict(model_args)
    cls = get_adapter(name)
    try:
        return cls(**args)
    except TypeError as err:
        raise AdapterError(f"--model {name}: bad --model_args ({err})") from None


def describe(name: str) -> str:
    """First docstring line of the adapter class (imports its module)."""
    doc = (get_adapter(name).__doc__ or "").strip().splitlines()
    return doc[0] if doc else ""
