"""`python -m harness`: the subcommand dispatch and the mapping of errors to exit codes."""

from __future__ import annotations

import sqlite3
import sys

from harness.cli.common import EXIT_RESOURCE, error_line, flag_value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from casu_dataset.core.redact import guard_logging

    guard_logging()  # push and pr-eval-results talk to the Hub with a token too
    from harness.cli.export_tasks import cmd_export_tasks
    from harness.cli.listing import cmd_list
    from harness.cli.push import cmd_pr_eval_results, cmd_push
    from harness.cli.run import cmd_run
    from harness.cli.table import cmd_table
    from harness.cli.validate import cmd_validate

    cmds = {
        "list": cmd_list,
        "validate": cmd_validate,
        "push": cmd_push,
        "run": cmd_run,
        "table": cmd_table,
        "pr-eval-results": cmd_pr_eval_results,
        "export-tasks": cmd_export_tasks,
    }
    from casu_dataset.core.errors import CasuError
    from casu_dataset.core.signals import Stopped, restore_signals, stop_on_signals, stopped_exit

    survive_any_encoding()
    previous = stop_on_signals()  # Ctrl+C -> KeyboardInterrupt, SIGTERM -> Stopped (restored below)
    try:
        if argv and argv[0] in cmds:
            return cmds[argv[0]](argv[1:])
        return cmd_run(argv)
    except (KeyboardInterrupt, Stopped) as err:
        code, name = stopped_exit(err)
        error_line(
            f"stopped by {name}: the response cache keeps every answer received (the same command "
            "resumes from them); no results file was written half (files are renamed into place whole)"
        )
        return code
    except CasuError as err:  # an expected failure (bad input 2, the model 3, the Hub 5): one line, its code
        error_line(err)
        return err.exit_code
    except (OSError, MemoryError, sqlite3.Error) as err:  # a full disk, a size limit, no memory: exit 6
        from casu_dataset.core.errors import resource_message

        msg = resource_message(err, flag_value(argv, "--output_path"))
        if msg is None:
            raise
        error_line(msg)
        return EXIT_RESOURCE
    finally:
        restore_signals(previous)
        # Free Arrow objects held in reference cycles while Arrow is still alive: left to the
        # interpreter's final teardown, a parquet reader's native thread is destroyed after its
        # pool and the process aborts after its work is done ("terminate called without an
        # active exception", exit -6; apache/arrow#34314), seen here under load.
        import gc

        gc.collect()


def survive_any_encoding() -> None:
    """stdout and stderr write any text: a character the terminal's encoding lacks
    (PYTHONIOENCODING=ascii, a C locale) is written as a backslash escape, never a
    UnicodeEncodeError (a prompt printed by --write_out, a task name in a table)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or detached stream: left as it is
                pass
