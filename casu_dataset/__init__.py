"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""

import os as _os
import sys as _sys

__version__ = "0.2.0"

# Arrow's default allocator, mimalloc, gives big buffers fresh huge pages to zero, and parquet's
# dictionary encoder takes the default allocator whatever pool a writer is given: it grows a copy
# of every audio column to tens of MB before falling back to plain encoding. With mimalloc that
# doubled a build's parquet writing (1.3-1.7 s against 0.6-0.9 s at 96 scenes; glibc grows a big
# block in place). Only read when pyarrow first loads, so set here, before; the bytes never change.
if "pyarrow" not in _sys.modules:
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# Lazy, so `import casu_dataset` stays cheap: the loader (`casu_dataset.load(path, task)`, see
# formats/loading.py), the `datasets` view with decoded audio (`casu_dataset.load_dataset`,
# dataset/hf_view.py) and the build API (`casu_dataset.build(casu_dataset.BuildConfig(out=...))`, api.py).
_LAZY = {
    "load": "formats.loading",
    "Row": "formats.loading",
    "LoadError": "formats.loading",
    "data_files": "formats.loading",
    "waveform": "formats.loading",
    "decode_audio": "formats.loading",
    "load_dataset": "dataset.hf_view",
    "SoundfileAudio": "dataset.hf_view",
    "BuildConfig": "dataset.config",
    "BuildResult": "api",
    "ConfigError": "dataset.config",
    "build": "api",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
