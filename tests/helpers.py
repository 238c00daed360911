"""How the tests run CASU's command lines, in one place.

In this process (`call_main`, `harness_cli`, `harness_run`): the default, as it costs no start-up
(a fresh interpreter re-imports the stack, and models loaded once stay cached). As a real process
(`cli_process`): only where the process boundary is what a test checks (exit status of the real
entry point, signals, kills, resource limits, another environment or working folder)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def call_main(main, argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of a CLI `main(argv)` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def harness_cli(*argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `python -m harness ARGV`, run in this process."""
    from harness.cli import main

    return call_main(main, argv)


def harness_argv(ds, out, *argv, model="random", tasks="role_inference") -> list[str]:
    """The evaluation command line most tests start from: `tasks` of dataset `ds` into `out`,
    quiet and without the audio probe; `argv` is appended (a later flag overrides)."""
    base = ["--model", model, "--tasks", tasks, "--dataset", str(ds), "--output_path", str(out)]
    return [*base, "--quiet", "--no_probe", *argv]


def harness_run(ds, out, *argv, model="random", tasks="role_inference") -> tuple[int, str, str]:
    """`harness_cli` of `harness_argv`: role_inference of `ds` into `out` by default."""
    return harness_cli(*harness_argv(ds, out, *argv, model=model, tasks=tasks))


def cli_process(
    module: str, *argv, env=None, cwd=ROOT, timeout=600, check=False, preexec_fn=None
) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGV` (harness or casu_dataset) as its own process, text output captured;
    `preexec_fn` runs in the child before Python starts (e.g. a resource limit for it alone);
    `check`: an AssertionError with the exit status and the output's tail unless it exits 0."""
    p = subprocess.run(
        [sys.executable, "-m", module, *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
    if check and p.returncode != 0:
        cmd = " ".join(map(str, argv))
        raise AssertionError(f"{module} {cmd}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p
