"""Model adapters: one class per model family behind one small interface (`base.Adapter`).

`get_adapter(name)` imports only the module that defines `name`, so `--model random` never
imports torch or transformers. See `registry.py` for the names.
"""

from model_adapters.base import Adapter, AdapterError, GenerationSettings, Request
from model_adapters.registry import adapter_names, get_adapter, make_adapter

__all__ = [
    "Adapter",
    "AdapterError",
    "GenerationSettings",
    "Request",
    "adapter_names",
    "get_adapter",
    "make_adapter",
]
