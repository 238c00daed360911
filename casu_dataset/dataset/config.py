"""The typed build config: every setting of a build, each checked with an error naming its field.

`casu_dataset.api.build` (and `casu build`, which only parses flags into it) takes a BuildConfig; the
dataset stage reads its settings from it. Importing it loads nothing heavy.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from casu_dataset.core.errors import Field, FieldError, InputError

#: `scenarios` names of the shipped libraries (anything else is a folder or file path).
LIBRARIES = ("default", "v2", "v1")
EXECUTORS = ("local", "ray")
LOCK_MODES = ("follow", "relock", "ignore")
REALIZATIONS = (1, 2)


class ConfigError(InputError, FieldError, ValueError):
    """A BuildConfig value (or what it points to) that cannot be built; its message names the
    field (`str()`), or the CLI's flag (`render`)."""


def _out_name_room() -> int:
    """The most bytes a build adds to the output folder's name beside it: its staging folder of
    the old build (`.NAME.old.tmp-HOST-PID`) or the review log (`NAME.decisions.jsonl`)."""
    from casu_dataset.core import atomic

    staged = len(atomic.tmp_path(Path("x.old")).name.encode()) - 1 + 3  # a pid may grow by 3 digits
    return max(staged, len(".decisions.jsonl"))


def out_problem(path: str | Path) -> str | None:
    """Why an output folder cannot be written (None when it can): under a regular file, on a
    read-only or virtual filesystem (/proc), a symlink loop. Checked by making the folder and a
    probe file in it, then removing whatever the probe made, so a refused build leaves nothing."""
    import tempfile

    p = Path(path).expanduser()
    try:
        p.resolve(strict=False)
    except (RuntimeError, OSError) as err:  # "Symlink loop" (RuntimeError before Python 3.13)
        return f"cannot resolve the path ({err})"
    if p.exists() and not p.is_dir():
        return "is a file, not a folder"
    # Files beside the folder are named after it (review decisions, staging and temp folders):
    # the name must leave room for their suffixes, or the build fails after all its work.
    try:
        name_max = os.pathconf(next((a for a in [p, *p.parents] if a.exists()), Path("/")), "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    room = _out_name_room()
    if len(p.name.encode()) + room > name_max:
        return (
            f"the folder name is {len(p.name.encode())} bytes; files beside it add up to {room} to it, "
            f"over this file system's limit of {name_max}: give a shorter name"
        )
    made = []
    try:
        for a in [*reversed(p.parents), p]:
            if not a.exists():
                if a.is_symlink():
                    return f"{a} is a dangling or looping symlink"
                a.mkdir()
                made.append(a)
            elif not a.is_dir():
                return f"{a} is a file, not a folder"
        fd, probe = tempfile.mkstemp(dir=p, prefix=".casu-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"cannot write there ({err.strerror or err})"
    finally:
        for a in reversed(made):
            try:
                a.rmdir()
            except OSError:
                pass
    return None


BUILD_RECORDS = ("casu_build.json", "build_report.json")  # what every CASU build folder holds


def replace_problem(path: str | Path) -> str | None:
    """Why a build may not replace the folder at `path` (None when it may). A build replaces a
    folder whole, so it takes only an empty one or one that holds a CASU build record: never a
    folder of the user's own files. Symlinks are followed (the build goes to the link's target,
    which is named here); CASU's own leftovers (temp names, the Hub upload's `.cache`) do not count."""
    from casu_dataset.core import atomic

    p = Path(path).expanduser()
    try:
        real = p.resolve(strict=False)
    except (RuntimeError, OSError) as err:
        return f"cannot resolve the path ({err})"
    if not real.is_dir():
        return None
    try:
        names = sorted(e.name for e in real.iterdir() if e.name != ".cache" and atomic.TMP_MARK not in e.name)
    except OSError as err:
        return f"cannot list it ({err.strerror or err})"
    if not names or any((real / r).is_file() for r in BUILD_RECORDS):
        return None
    where = f" (the link's target {real})" if real != p.absolute() else ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return (
        f"holds files that are not a CASU build{where}: {shown}; a build replaces only an empty folder "
        f"or an earlier build (one with {BUILD_RECORDS[0]}): give another folder, or empty this one yourself"
    )


def _int(name: str, v, lo: int, hi: int | None = None, none_ok: bool = False) -> None:
    if v is None and none_ok:
        return
    if not isinstance(v, int) or isinstance(v, bool):
        raise ConfigError(Field(name), f" {v!r}: not an integer")
    if v < lo or (hi is not None and v > hi):
        raise ConfigError(
            Field(name), f" {v}: " + (f"must be >= {lo}" if hi is None else f"must be in {lo}..{hi}")
        )


def _number(name: str, v, lo: float, hi: float, lo_open: bool = False, none_ok: bool = False) -> None:
    if v is None and none_ok:
        return
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise ConfigError(Field(name), f" {v!r}: not a finite number")
    if not (v > lo if lo_open else v >= lo) or not v <= hi:
        raise ConfigError(
            Field(name), f" {v}: must be " + (f"> {lo:g} and <= {hi:g}" if lo_open else f"in {lo:g}..{hi:g}")
        )


def _choice(name: str, v, choices: tuple) -> None:
    if v not in choices:
        raise ConfigError(Field(name), f" {v!r}: must be one of {', '.join(map(repr, choices))}")


def _text(name: str, v, none_ok: bool = False) -> None:
    if v is None and none_ok:
        return
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(Field(name), f" {v!r}: must be a non-empty string")


@dataclass(frozen=True)
class BuildConfig:
    """Everything a dataset build depends on; checked when made (ConfigError naming the field).

    out: the dataset folder (replaced atomically). scenarios: a family or scenario folder/file, or
    "default"/"v2" (the shipped CASU-mini v2 families) or "v1". lock: "follow" the library's
    realization lock when it has one, "relock" (decide afresh and write the lock; a whole build
    with the speech checks) or "ignore" it. max_skips: write the dataset when at most this many
    scenes were skipped (None: any number). catalogs: sound catalogs, merged ("embedded", a
    manifest.json, clotho:CSV:AUDIO_DIR[:META], fsd50k:CSV:AUDIO_DIR, arca23k:CSV:AUDIO_DIR).
    command: the command line written into the card. progress: progress bars and notes on the
    console. realization: 1 (the dataset) or 2 (the same items, every non-speech layer on another
    recording of the same bank type, the speech and timelines unchanged; its own lock file
    `realization2.lock.jsonl`, its own name; see casu_dataset/mix/second_realization.py)."""

    out: str | Path
    scenarios: str | Path = "default"
    seed: int = 0
    cache: str | Path | None = None
    alpha: float = 0.6
    embedding_model: str | None = None
    duration: float | None = None
    check_speech: bool = True
    catalogs: tuple[str, ...] = ("embedded",)
    num_shards: int = 1
    shard_index: int = 0
    num_proc: int = 1
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    ray_num_gpus: float | None = None
    lock: Literal["follow", "relock", "ignore"] = "follow"
    name: str | None = None
    max_skips: int | None = 0
    review_file: str | Path | None = None
    command: str = ""
    progress: bool = True
    realization: int = 1

    def __post_init__(self):
        from casu_dataset.script.schema import MAX_SCENE_SECONDS

        if not isinstance(self.out, (str, os.PathLike)) or not str(self.out):
            raise ConfigError(Field("out"), f" {self.out!r}: must be a folder path")
        if isinstance(self.catalogs, str):
            raise ConfigError(
                Field("catalogs"), f" {self.catalogs!r}: must be a list of catalogs, not one string"
            )
        object.__setattr__(self, "catalogs", tuple(self.catalogs))
        if not self.catalogs:
            raise ConfigError(Field("catalogs"), ": must name at least one catalog")
        for c in self.catalogs:
            _text("catalogs", c)
        _int("seed", self.seed, 0)
        _number("alpha", self.alpha, 0.0, 1.0)
        _number("duration", self.duration, 0.0, MAX_SCENE_SECONDS, lo_open=True, none_ok=True)
        _int("num_shards", self.num_shards, 1)
        _int("num_proc", self.num_proc, 1)
        _int("max_skips", self.max_skips, 0, none_ok=True)
        _int("shard_index", self.shard_index, 0)
        if self.shard_index >= self.num_shards:
            raise ConfigError(
                Field("shard_index"),
                f" {self.shard_index}: must be in 0..{self.num_shards - 1} for ",
                Field("num_shards"),
                f" {self.num_shards}",
            )
        _int("realization", self.realization, min(REALIZATIONS), max(REALIZATIONS))
        _choice("executor", self.executor, EXECUTORS)
        _choice("lock", self.lock, LOCK_MODES)
        _text("embedding_model", self.embedding_model, none_ok=True)
        _text("name", self.name, none_ok=True)
        _text("ray_address", self.ray_address, none_ok=True)
        if not isinstance(self.check_speech, bool):
            raise ConfigError(Field("check_speech"), f" {self.check_speech!r}: must be True or False")
        if not isinstance(self.scenarios, (str, os.PathLike)) or not str(self.scenarios):
            raise ConfigError(
                Field("scenarios"), f" {self.scenarios!r}: must be {', '.join(LIBRARIES)} or a path"
            )
        if self.executor != "ray" and (self.ray_address or self.ray_num_gpus is not None):
            raise ConfigError(
                Field("ray_address"), "/", Field("ray_num_gpus"), ": need ", Field("executor", "ray")
            )
        if self.ray_num_gpus is not None and (
            isinstance(self.ray_num_gpus, bool)
            or not isinstance(self.ray_num_gpus, (int, float))
            or not self.ray_num_gpus >= 0
        ):
            raise ConfigError(Field("ray_num_gpus"), f" {self.ray_num_gpus}: must be >= 0")
        if self.lock == "relock" and (self.num_shards > 1 or not self.check_speech):
            raise ConfigError(
                Field("lock", "relock"),
                ": a lock is made from a whole build with the speech checks (no ",
                Field("num_shards"),
                ", no ",
                Field("check_speech", "False"),
                ")",
            )

    def library(self) -> Path:
        """The scenario library's path (the shipped ones for "default", "v2" and "v1")."""
        from casu_dataset.scenarios import FAMILY_LIBRARY_DIR, SCENE_LIBRARY_DIR

        named = {"default": FAMILY_LIBRARY_DIR, "v2": FAMILY_LIBRARY_DIR, "v1": SCENE_LIBRARY_DIR}
        return Path(named.get(str(self.scenarios), self.scenarios))

    def builder_spec(self) -> dict:
        """The scene builder's settings (plain values: worker processes make their own builder)."""
        spec = {
            "cache": None if self.cache is None else str(self.cache),
            "embedding_model": self.embedding_model,
            "alpha": self.alpha,
            "check_speech": self.check_speech,
            "duration": self.duration,
            "catalogs": list(self.catalogs),
        }
        if self.realization != 1:
            spec["realization"] = self.realization
        return spec
