"""`python -m harness validate [PATHS] [--dataset D]`: check task YAMLs (and their data) without a model."""

from __future__ import annotations

import sys

from harness.cli.common import EXIT_OK, EXIT_USAGE, ArgumentParser


def cmd_validate(argv: list[str]) -> int:
    p = ArgumentParser(prog="python -m harness validate", description="check task YAMLs")
    p.add_argument("paths", nargs="*", help="YAML files or folders (default: tasks/)")
    p.add_argument(
        "--dataset",
        default=None,
        help="also check each task's config, split and columns in this built dataset folder or Hub repo",
    )
    a = p.parse_args(argv)
    from pathlib import Path

    from casu_dataset.formats.reader import LoadError
    from harness.run.data import CasuData
    from harness.task.config import (
        TaskConfigError,
        builtin_tasks_dir,
        load_task,
        load_tasks,
    )

    data = CasuData(a.dataset) if a.dataset else None
    bad = 0
    try:
        paths = [Path(x) for x in a.paths] or [builtin_tasks_dir()]
    except TaskConfigError as err:
        print(f"bad {err}", file=sys.stderr)
        return EXIT_USAGE
    for t in paths:
        try:
            cfgs = load_tasks([t]) if t.is_dir() else {"": load_task(t)}
        except TaskConfigError as err:
            print(f"bad {err}", file=sys.stderr)
            bad += 1
            continue
        for cfg in cfgs.values():
            try:
                if data is not None:
                    data.check_all([cfg])  # also: a config with no rows
                    data.samples(cfg.dataset_config, cfg.split)  # every row parses (answers, audio)
                print(f"ok  {cfg.task}")
            except LoadError as err:
                print(f"bad {cfg.task}: {err}", file=sys.stderr)
                bad += 1
    return EXIT_USAGE if bad else EXIT_OK
