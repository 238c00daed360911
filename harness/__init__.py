"""CASU evaluation harness. Python entry point: `harness.simple_evaluate(...) -> harness.Results`."""


def __getattr__(name):  # lazy: `import harness` stays cheap for `python -m harness list`
    if name in ("simple_evaluate", "Results", "UsageError"):
        from harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


__all__ = ["simple_evaluate", "Results", "UsageError"]
