"""`python -m harness`: the subcommand dispatch and the mapping of errors to exit codes."""

from __future__ import annotations

import sqlite3
import sys

from harness.cli.common import EXIT_RESOURCE, error_line, flag_value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from casu_dataset.core.redact import guard_logging

    guard_logging()  # push and pr-eval-results talk to the Hub with a token too
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
    }
    from casu_dataset.core.errors import CasuError

    try:
        if argv and argv[0] in cmds:
            return cmds[argv[0]](argv[1:])
        return cmd_run(argv)
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
        # Free Arrow objects held in reference cycles while Arrow is still alive: left to the
        # interpreter's final teardown, a parquet reader's native thread is destroyed after its
        # pool and the process aborts after its work is done ("terminate called without an
        # active exception", exit -6; apache/arrow#34314), seen here under load.
        import gc

        gc.collect()
