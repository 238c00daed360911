"""The run's output paths checked before anything is written or loaded: --output_path and --cache
must be usable, and never inside a dataset folder the run reads."""

from __future__ import annotations

import os
from pathlib import Path

from harness.config import UsageError


def check_no_collision(output_path, cache, dataset, robustness_dataset) -> None:
    """UsageError when --output_path or --cache is, holds or lies inside a dataset folder (the run
    would write its results and cache into the data it reads)."""
    from casu_dataset.core.paths import collision, describe

    local = {
        flag: d
        for flag, d in (("--dataset", dataset), ("--robustness_dataset", robustness_dataset))
        if d is not None and os.path.exists(os.path.expanduser(str(d)))
    }
    outs = {"--output_path": output_path, "--cache": cache if cache not in (None, "off") else None}
    clash = collision(outs, local)
    if clash:
        raise UsageError(describe(clash))


def check_creatable(out: str) -> None:
    """UsageError unless --output_path is a folder this process can write, or can be made: its
    nearest existing ancestor is a writable folder. Nothing is created here: a run that fails
    before it writes leaves no empty folder behind."""
    p = Path(os.path.abspath(os.path.expanduser(out)))
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"--output_path {out}: {probe} is a file, so the folder cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "folder" if probe == p else f"folder ({probe} is not writable)"
        raise UsageError(f"--output_path {out}: cannot create the {what} (Permission denied)")


def check_paths(output_path: str | None, cache: str | None) -> None:
    """UsageError when --output_path or --cache cannot be used (nothing is created)."""
    out = output_path
    if out is not None:
        if out.lower().endswith((".json", ".jsonl")) and not os.path.isdir(out):
            raise UsageError(
                f"--output_path {out}: give a folder, not a file name (a run writes several files "
                f"under <folder>/<model>/: lm-eval's results_<date>.json, CASU's casu_results_<date>.json, "
                f"sample logs, report, plots); e.g. --output_path {os.path.splitext(out)[0] or 'results'}"
            )
        output_target(out, f"--output_path {out}", "folder")  # a link loop, a dangling link, a FIFO
        if os.path.exists(out) and not os.path.isdir(out):
            raise UsageError(f"--output_path {out}: is a file, not a folder")
        check_creatable(out)
    if cache and cache != "off":
        if os.path.isdir(cache):
            raise UsageError(
                f"--cache {cache}: is a folder; give a file path (e.g. {os.path.join(cache, 'cache.sqlite')})"
            )
        output_target(cache, f"--cache {cache}", "file")
        if os.path.isfile(cache) and os.path.getsize(cache) > 0:
            with open(cache, "rb") as f:
                if f.read(16) != b"SQLite format 3\x00":
                    raise UsageError(
                        f"--cache {cache}: not a SQLite database (the harness's response cache); "
                        "give a new file name or 'off'"
                    )


def output_target(path: str, what: str, kind: str) -> Path:
    """The real place an output path names (casu_dataset.core.paths.output_target): a symlink loop,
    a link to nothing, or a FIFO or device in its place is a UsageError naming it and its target."""
    from casu_dataset.core.paths import PathError, output_target

    try:
        return output_target(path, what, kind)
    except PathError as err:
        raise UsageError(str(err)) from None
