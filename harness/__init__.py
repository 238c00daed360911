"""CASU evaluation harness. Python entry point: `harness.simple_evaluate(config or model, ...) ->
harness.Results`, with `harness.EvalConfig` the settings of a run."""


def __getattr__(name):  # lazy: `import harness` stays cheap for `python -m harness list`
    if name in ("simple_evaluate", "Results"):
        from harness import api

        return getattr(api, name)
    if name in ("EvalConfig", "UsageError"):
        from harness import config

        return getattr(config, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


__all__ = ["simple_evaluate", "Results", "EvalConfig", "UsageError"]
