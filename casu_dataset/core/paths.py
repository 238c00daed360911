"""One rule for outputs: a command never writes where it reads. An output path that equals,
contains or lies inside an input (a library, a dataset, a cache, a bank) is refused before any
work, naming both, since writing it would replace or pollute the input."""

from __future__ import annotations

from pathlib import Path


def _real(p) -> Path:
    return Path(p).expanduser().resolve(strict=False)


WHY = ": writing there would replace or pollute an input; write somewhere else"


def collision(
    outputs: dict[str, object], inputs: dict[str, object]
) -> tuple[str, object, str, str, object] | None:
    """The first clash between an output and an input, as (output key, output path, "is" /
    "contains" / "lies inside", input key, input path), or None; keys are flags or field names.
    Empty values are skipped."""
    for out_key, out in outputs.items():
        try:
            o = _real(out) if out else None
        except (OSError, RuntimeError):  # a symlink loop: the output check names it
            o = None
        if o is None:
            continue
        for in_key, inp in inputs.items():
            try:
                i = _real(inp) if inp else None
            except (OSError, RuntimeError):
                i = None
            if i is None:
                continue
            if o == i:
                rel = "is"
            elif i.is_relative_to(o):
                rel = "contains"
            elif o.is_relative_to(i):
                rel = "lies inside"
            else:
                continue
            return out_key, out, rel, in_key, inp
    return None


def describe(clash: tuple[str, object, str, str, object]) -> str:
    """A clash in one line, its keys shown as given (flags)."""
    out_key, out, rel, in_key, inp = clash
    return f"{out_key} {out} {rel} {in_key} {inp}{WHY}"
