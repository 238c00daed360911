"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""
__version__ = "0.2.0"


def __getattr__(name):
    # Lazy, so `import casu_dataset` stays cheap: `casu_dataset.load(path, task)` (see loading.py).
    if name in ("load", "Row", "LoadError", "data_files", "waveform"):
        from . import loading
        return getattr(loading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
