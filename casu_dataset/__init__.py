"""CASU data pipeline: scene scripts -> layers -> mix -> dataset."""
import sys
import types

__version__ = "0.2.0"

# Lazy, so `import casu_dataset` stays cheap: the loader (`casu_dataset.load(path, task)`, see
# loading.py) and the build API (`casu_dataset.build(casu_dataset.BuildConfig(out=...))`, api.py).
_LAZY = {"load": "loading", "Item": "loading", "LoadError": "loading", "data_files": "loading",
         "waveform": "loading", "BuildConfig": "api", "BuildResult": "api", "ConfigError": "api", "build": "api"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # `casu_dataset.build` names the build function, but importing the submodule build.py
        # binds that name to the module; the module stays in sys.modules for `from
        # casu_dataset.build import ...`, and the name keeps resolving through __getattr__.
        if name == "build" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
