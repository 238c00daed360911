"""`python -m harness table [FOLDER]`: table 1 over every model's newest results in a folder."""

from __future__ import annotations

import os
import sys

from harness.cli.common import EXIT_OK, EXIT_USAGE, ArgumentParser, error_line


def cmd_table(argv: list[str]) -> int:
    p = ArgumentParser(
        prog="python -m harness table", description="table 1 over every model's newest results in a folder"
    )
    p.add_argument("output_path", nargs="?", default="results")
    a = p.parse_args(argv)
    from harness.output.document import latest_documents
    from harness.output.tables import main_table

    if os.path.lexists(a.output_path):  # a symlink loop, a dangling link, a FIFO: named
        from casu_dataset.core.paths import PathError, input_path

        try:
            input_path(a.output_path, a.output_path, "folder")
        except PathError as err:
            error_line(err)
            return EXIT_USAGE
    skipped: list = []
    docs = latest_documents(a.output_path, skipped) if os.path.isdir(a.output_path) else []
    for f, why in skipped:
        print(f"skipped {f}: {why}", file=sys.stderr)
    if not docs:
        error_line(f"{a.output_path}: no complete results (casu_results_*.json) found")
        return EXIT_USAGE
    print(main_table(*docs))
    return EXIT_OK
