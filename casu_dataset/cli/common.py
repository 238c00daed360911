"""What several subcommands share: the error line, argparse types, the scene-builder flags."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from casu_dataset.core.env_vars import environment
from casu_dataset.core.errors import Field
from casu_dataset.dataset.config import out_problem, replace_problem


def error(msg) -> None:
    """One error line on stderr, with any API key or token in it redacted."""
    from casu_dataset.core.redact import redact

    print(f"error: {redact(msg)}", file=sys.stderr)


def check_out(path, flag: str = "--out", replaces: bool = False) -> str | None:
    """Why an output folder cannot be written, naming the flag (None when it can); `replaces`:
    the command replaces the folder whole, so it must be empty or an earlier CASU build."""
    why = out_problem(path) or (replace_problem(path) if replaces else None)
    return why and f"{flag} {path}: {why}"


def check_out_file(path, flag: str) -> str | None:
    """Why a report file cannot be written at `path`, naming the flag (None when it can): checked
    before any work, so a bad path never costs a run."""
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        return f"{flag} {path}: a folder; give a file name (e.g. {p / 'report.txt'})"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"{flag} {path}: its folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        return f"{flag} {path}: not writable"
    return None


def write_report(path, text: str, flag: str) -> bool:
    """Write a report file atomically; False (after one error line naming the flag) when the disk
    refuses it (full, read-only, too long a name)."""
    from casu_dataset.core import atomic

    try:
        atomic.write_text(Path(path), text)
    except OSError as err:
        error(f"{flag} {path}: cannot write it ({err.strerror or err})")
        return False
    return True


def int_in(lo: int, hi: int | None = None):
    """argparse type: an integer in [lo, hi] (argparse names the flag in its error)."""

    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(
                f"must be >= {lo}, got {v}" if hi is None else f"must be in {lo}..{hi}, got {v}"
            )
        return v

    return conv


def float_in(lo: float, hi: float, lo_open: bool = False):
    """argparse type: a finite number in [lo, hi] (or (lo, hi] with lo_open)."""

    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (v > lo if lo_open else v >= lo) or not v <= hi:  # NaN fails both
            raise argparse.ArgumentTypeError(
                f"must be > {lo:g} and <= {hi:g}, got {text}"
                if lo_open
                else f"must be in {lo:g}..{hi:g}, got {text}"
            )
        return v

    return conv


def scene_flags(p) -> None:
    """The flags of every command that composes scenes."""
    from casu_dataset.script.schema import MAX_SCENE_SECONDS

    p.add_argument("--seed", type=int_in(0), default=0, help="seed for every random choice (default 0)")
    p.add_argument("--cache", default=None, help="cache folder (default $CASU_CACHE or ~/.cache/casu)")
    p.add_argument(
        "--alpha",
        type=float_in(0.0, 1.0),
        default=0.6,
        help="matching-score weight of the description (0..1)",
    )
    p.add_argument(
        "--embedding-model", default=None, help="sentence-transformers name or path (default MiniLM)"
    )
    p.add_argument(
        "--duration",
        type=float_in(0.0, MAX_SCENE_SECONDS, lo_open=True),
        default=None,
        help=f"fixed scene length in s (default: fit, <= {MAX_SCENE_SECONDS:g})",
    )


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@contextmanager
def hub_offline():
    """Offline Hub access for the duration of a command, for each variable the user did not set:
    commands read local files only, so a missing model fails fast instead of downloading. The
    environment and huggingface_hub's constant (read once, at its import) are restored afterwards."""
    ours = [k for k in _OFFLINE_VARS if k not in os.environ]
    constants = sys.modules.get("huggingface_hub.constants")
    before = constants.HF_HUB_OFFLINE if constants is not None else None
    if constants is not None and "HF_HUB_OFFLINE" in ours:
        constants.HF_HUB_OFFLINE = True
    try:
        with environment(dict.fromkeys(ours, "1")):
            yield
    finally:
        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None and "HF_HUB_OFFLINE" in ours:  # imported before the command or by it
            constants.HF_HUB_OFFLINE = bool(before)


def scripts(paths: list[str]):
    """(file, SceneScript) of each script file, or of each .yaml/.json file in a folder."""
    from casu_dataset.script.schema import load_script

    files: list[Path] = []
    for name in paths:
        p = Path(name)
        files += sorted(p.glob("*.y*ml")) + sorted(p.glob("*.json")) if p.is_dir() else [p]
    return [(f, load_script(f)) for f in files]


def builder(args, check_speech: bool):
    """A SceneBuilder from the scene flags."""
    from casu_dataset.mix.realize import make_builder

    return make_builder(
        {
            "cache": args.cache,
            "embedding_model": args.embedding_model,
            "alpha": args.alpha,
            "check_speech": check_speech,
            "duration": args.duration,
            "catalogs": ["embedded"],
        }
    )


def long_flag(f: Field) -> str:
    """A library field named in an error as the flag of the same name (`out` -> --out), for the
    commands whose flags are their arguments' names."""
    return f"--{f.name}" if f.value is None else f"--{f.name} {f.value}"


def dashed_flag(f: Field) -> str:
    """As long_flag, for the commands whose flags use dashes (`embedding_model` -> --embedding-model)."""
    name = f.name.replace("_", "-")
    return f"--{name}" if f.value is None else f"--{name} {f.value}"
