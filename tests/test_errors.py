"""Errors by meaning: every error class derives from exactly one of the five bases of
core/errors.py, which alone set the exit code; every class name ends in `Error`."""

import importlib
import inspect
import pkgutil
from pathlib import Path

from casu_dataset.core.errors import (
    CasuError,
    FieldError,
    HubError,
    InputError,
    ModelError,
    ResourceError,
    RunError,
)

ROOT = Path(__file__).resolve().parents[1]
BASES = {InputError: 2, RunError: 1, ModelError: 3, HubError: 5, ResourceError: 6}
# Exception classes of the packages that are not CasuErrors, and why their names may lack `Error`.
NOT_CASU = {
    # SIGTERM's exception is control flow, like KeyboardInterrupt (a BaseException no
    # `except Exception` may swallow), not an error: named as what happened.
    "casu_dataset.core.signals.Stopped",
}
# Not raised: the message mechanism a class combines with its base (no exit code of its own).
MECHANISMS = {FieldError}


def _modules():
    """Every module of the three packages (the `__main__` scripts run a command when imported)."""
    for pkg in ("casu_dataset", "harness", "model_adapters"):
        yield pkg
        for m in pkgutil.walk_packages([str(ROOT / pkg)], prefix=f"{pkg}."):
            if not m.name.endswith("__main__"):
                yield m.name


def _exception_classes() -> tuple[dict[str, type], list[str]]:
    """Every exception class defined in the three packages, by qualified name, and the modules
    that could not be imported (an optional extra, e.g. a peer's package, not installed)."""
    classes, unimportable = {}, []
    for name in _modules():
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as err:  # a peer's package (lm_eval, lmms_eval) not installed
            assert not err.name.startswith(("casu_dataset", "harness", "model_adapters")), err
            unimportable.append(name)
            continue
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == name:
                classes[f"{name}.{cls.__qualname__}"] = cls
    return classes, unimportable


def violations(classes: dict[str, type]) -> list[str]:
    """What breaks the rules, one line per class and rule."""
    out = []
    for name, cls in classes.items():
        if name in NOT_CASU:
            continue
        short = name.rsplit(".", 1)[1]
        if not short.endswith("Error"):
            out.append(f"{name}: not named ...Error")
        if not issubclass(cls, CasuError):
            out.append(f"{name}: not a CasuError")
            continue
        if cls is CasuError or cls in MECHANISMS:
            continue
        bases = [b for b in BASES if issubclass(cls, b)]
        if len(bases) != 1:
            out.append(f"{name}: {len(bases)} of the five bases ({[b.__name__ for b in bases]})")
        if "exit_code" in vars(cls) and cls not in BASES:
            out.append(f"{name}: sets exit_code itself")
    return out


def test_every_error_has_one_meaning_and_its_base_alone_sets_the_exit_code():
    classes, unimportable = _exception_classes()
    assert len(classes) >= 45, sorted(classes)  # the error classes there were when this was written
    assert len(unimportable) <= 2, unimportable
    assert violations(classes) == []
    assert {b.__name__: b.exit_code for b in BASES} == {
        "InputError": 2,
        "RunError": 1,
        "ModelError": 3,
        "HubError": 5,
        "ResourceError": 6,
    }
    assert all(b.__bases__ in ((CasuError,), (FieldError,)) for b in BASES)  # none derives another
    assert "exit_code" not in vars(CasuError) and all("exit_code" not in vars(m) for m in MECHANISMS)
    for name in NOT_CASU:  # control flow: nothing `except Exception` could swallow
        assert not issubclass(classes[name], Exception), name
    # What some errors mean, by the exit code a command gives them.
    codes = {
        "casu_dataset.core.errors.BuildError": 1,
        "casu_dataset.core.errors.HubError": 5,
        "casu_dataset.core.hub.PushError": 2,
        "casu_dataset.core.llm.backends.BackendError": 3,
        "model_adapters.base.ModelArgsError": 2,
        "model_adapters.base.AdapterError": 3,
        "casu_dataset.script.schema.ScriptError": 2,
    }
    assert {n: classes[n].exit_code for n in codes} == codes


def test_the_rules_catch_each_kind_of_planted_violation():
    class SelfCodedError(InputError):
        exit_code = 4

    class TwoMeaningsError(InputError, RunError):
        pass

    class NoMeaningError(CasuError):
        pass

    class FieldOnlyError(FieldError, ValueError):
        pass

    class BadThing(RunError):
        pass

    class PlainError(ValueError):
        pass

    class GoodError(ModelError, FieldError, RuntimeError):
        pass

    planted = {f"planted.{c.__name__}": c for c in (SelfCodedError, TwoMeaningsError, NoMeaningError)}
    planted |= {f"planted.{c.__name__}": c for c in (FieldOnlyError, BadThing, PlainError, GoodError)}
    assert violations(planted) == [
        "planted.SelfCodedError: sets exit_code itself",
        "planted.TwoMeaningsError: 2 of the five bases (['InputError', 'RunError'])",
        "planted.NoMeaningError: 0 of the five bases ([])",
        "planted.FieldOnlyError: 0 of the five bases ([])",
        "planted.BadThing: not named ...Error",
        "planted.PlainError: not a CasuError",
    ]
