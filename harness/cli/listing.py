"""`python -m harness list` (and `--tasks list`): the tasks, groups, models and conditions; lm-eval's
`python -m harness ls tasks|groups|subtasks|tags [--include_path DIR]`."""

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
        shown = f" (shown as {t.alias!r})" if t.alias else ""
        print(f"  {name:28s} v{t.version}  {t.output_type:16s} {t.description}{shown}")
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


LS_WHAT = ("tasks", "groups", "subtasks", "tags")


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    line = lambda cells: "|" + "|".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + "|"  # noqa: E731
    return "\n".join(
        [line(headers), "|" + "|".join(":" + "-" * (w - 1) for w in widths) + "|", *map(line, rows)]
    )


def ls_tables(tasks: dict, what: str) -> str:
    """lm-eval's `ls` output (TaskManager.list_all_tasks): Markdown tables of the groups (group files;
    CASU's built-in `casu` is a tag), the tags and the tasks (`subtasks`), as `what` asks."""
    groups: dict[str, str] = {}
    for t in tasks.values():
        for g in t.lmeval_groups or []:
            groups.setdefault(g["group"], g["file"])
    tags = sorted({tag for t in tasks.values() for tag in t.tags} - set(groups))
    parts = []
    if what in ("tasks", "groups"):
        parts.append(_markdown(["Group", "Config Location"], [[g, f] for g, f in sorted(groups.items())]))
    if what in ("tasks", "tags"):
        parts.append(_markdown(["Tag"], [[t] for t in tags]))
    if what in ("tasks", "subtasks"):
        parts.append(
            _markdown(
                ["Task", "Config Location", "Output Type"],
                [[n, t.source_file or "---", t.output_type] for n, t in tasks.items()],
            )
        )
    return "\n" + "".join(p + "\n\n" for p in parts)


def cmd_ls(argv: list[str]) -> int:
    """`python -m harness ls [tasks|groups|subtasks|tags] [--include_path DIR]`, as lm-eval 0.4.13's
    `lm-eval ls`: without a choice it prints its help."""
    import os
    import sys

    from harness.cli.common import ArgumentParser
    from harness.task.config import TaskConfigError, load_tasks, with_builtins

    p = ArgumentParser(
        prog="python -m harness ls",
        description="List the tasks, groups, subtasks or tags (lm-eval's `ls`; `tasks` lists all three).",
    )
    p.add_argument(
        "what", choices=LS_WHAT, nargs="?", help="what to list: tasks (all), groups, subtasks or tags"
    )
    p.add_argument(
        "--include_path",
        action="append",
        default=None,
        metavar="DIR",
        help="extra folder(s) of task YAMLs (repeatable, or DIR1:DIR2 as lm-eval)",
    )
    args = p.parse_args(argv)
    if args.what is None:
        p.print_help()
        return EXIT_OK
    dirs = [d for x in args.include_path or [] for d in x.split(os.pathsep) if d]
    skipped: list[TaskConfigError] = []
    print(ls_tables(load_tasks(with_builtins(dirs), skipped=skipped), args.what), end="")
    for err in skipped:
        print(f"skipped a task file: {err}", file=sys.stderr)
    return EXIT_OK
