"""What every `python -m harness` subcommand shares: the exit codes, the one-line error, argparse
helpers."""

from __future__ import annotations

import argparse
import sys

from casu_dataset.core.errors import EXIT_RESOURCE  # 6, shared with the builder

EXIT_OK, EXIT_USAGE, EXIT_MODEL, EXIT_SAMPLE_ERRORS, EXIT_HUB = 0, 2, 3, 4, 5
EXIT_UNPARSED = 7  # --strict only
__all__ = ["EXIT_RESOURCE"]  # the CLI's exit codes are all importable from here

EXIT_CODES = """exit codes:
  0  success
  2  bad input: a flag, a --model_args value, a task YAML, the dataset, --cache or --output_path
     (the message names which and why); checked before any model loads
  3  the model cannot be loaded or run (unknown --model, missing weights, arguments the adapter refuses,
     an API that refuses the key or model), or more than 25% of at least 20 requests failed (the
     answers received are cached: rerun to resume)
  4  the run finished but some samples failed (listed in the results; the first is printed); they are
     not cached, so the same command again retries only them
  5  push / pr-eval-results, or a run with --hf_hub_log_args push_results_to_hub=true: the Hub could not
     be reached (offline, HF_HUB_OFFLINE=1, no route) or refused the upload (token, permissions, missing
     repo); one line says which (after a run: the results stay on disk, and the line gives the
     `python -m harness push ...` command that sends them)
  6  a resource ran out: no space left, a file size limit, too long a path, no permission, no memory
     (one line names the path; answers already received stay cached)
  7  --strict: more than half of a task's answers could not be parsed (without --strict the run
     says so in one line and exits 0, as lm-eval does)
  130, 143  stopped by Ctrl+C (SIGINT) or SIGTERM: one line; the response cache keeps every answer
     received (the same command resumes from them) and no results file is left half-written"""


def error_line(msg) -> None:
    """One error line on stderr, with any API key or token in it redacted."""
    from casu_dataset.core.redact import redact

    print(f"error: {redact(msg)}", file=sys.stderr)


def int_at_least(lo: int):
    """argparse type: an integer >= lo (argparse names the flag in its error)."""

    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v

    return conv


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def flag_value(argv: list[str], flag: str) -> str | None:
    """'FLAG VALUE' as typed (`FLAG VALUE` or `FLAG=VALUE`), or None."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return f"{flag} {argv[i + 1]}"
        if a.startswith(flag + "="):
            return f"{flag} {a.split('=', 1)[1]}"
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse with lm-eval's flags refused in one line: the flag and why, and where the help is
    (argparse's own error prints the whole usage first, 20 lines above the one that matters)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message} (all flags: `{self.prog} --help`)\n")
