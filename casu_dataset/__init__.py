"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""

__version__ = "0.2.0"

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
