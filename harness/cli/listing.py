"""`python -m harness list` (and `--tasks list`): the tasks, groups, models and conditions."""

from __future__ import annotations

from harness.cli.common import EXIT_OK


def print_tasks(include_path=None) -> int:
    import sys

    from harness.task.config import TaskConfigError, load_tasks, with_builtins

    skipped: list[TaskConfigError] = []
    print_task_table(load_tasks(with_builtins(include_path), skipped=skipped))
    for err in skipped:
        print(f"skipped a task file: {err}", file=sys.stderr)
    return EXIT_OK


def print_task_table(tasks: dict) -> None:
    """The tasks, then the groups (tags) that `--tasks NAME` selects, as lm-eval's `--tasks list`."""
    print("tasks:")
    for name, t in tasks.items():
        print(f"  {name:28s} v{t.version}  {t.output_type:16s} {t.description}")
    groups: dict[str, list[str]] = {}
    for name, t in tasks.items():
        for tag in t.tags:
            groups.setdefault(tag, []).append(name)
    print("groups (--tasks NAME runs every task of the group; all = every task):")
    for tag, names in sorted(groups.items()):
        print(f"  {tag:28s} {', '.join(names)}")


def cmd_list(argv: list[str]) -> int:
    from harness.run.conditions import ALL, FULL
    from harness.task.config import load_tasks
    from model_adapters.registry import adapter_names, describe

    print_task_table(load_tasks())
    print("models:")
    for n in adapter_names():
        print(f"  {n:28s} {describe(n)}")
    print("conditions (P speech, E events, B background; _ = replaced by loudness-matched noise):")
    print("  " + "  ".join(c.name for c in ALL) + f"   (full = {FULL.name}, all = the eight)")
    return EXIT_OK
