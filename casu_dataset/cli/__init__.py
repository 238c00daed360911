"""`python -m casu_dataset COMMAND`: compose, regenerate, demo, retrieval-eval, voices, validity, generate."""

from __future__ import annotations

import argparse

from casu_dataset.cli import (
    audit,
    build,
    compare,
    compose,
    demo,
    generate,
    merge,
    push,
    regenerate,
    retrieval_eval,
    review,
    timeline,
    validity,
    voices,
)
from casu_dataset.cli.clock import T0  # noqa: F401,I001  (first: the build's stage breakdown counts the imports below)
from casu_dataset.cli.common import error, hub_offline
from casu_dataset.core.errors import CasuError

EXIT_CODES = """exit codes:
  0  success
  1  the work failed: a build or merge failed, a composed scene was skipped,
     regenerate --check found a different mixture, validity found a violation
  2  bad input: a flag, a file or a folder (the message names which and why)
  3  a model: generate's LLM server refused the requests (401, 403, 404) or kept failing (replies
     already received stay cached, so re-running resumes), or a local LLM (SmolLM2) cannot load
  5  push: the Hub could not be reached (offline, HF_HUB_OFFLINE=1, no route) or refused the upload
     (token, permissions); one line says which. Re-running resumes: files already committed are skipped
  6  a resource ran out: no space left, a file size limit, too long a path, no permission, no memory
     (one line names the path; no half-written output is left, and the caches keep what was done)
  130, 143  stopped by Ctrl+C (SIGINT) or SIGTERM: one line says what was kept (nothing half-written
     is left; the output folder is as it was; the caches keep what was done, so a re-run resumes)"""

# In the order `--help` lists them.
COMMANDS = (
    compose,
    regenerate,
    demo,
    retrieval_eval,
    voices,
    validity,
    audit,
    build,
    compare,
    merge,
    push,
    review,
    timeline,
    generate,
)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m casu_dataset",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        command.add(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from casu_dataset.core.log import setup_console_logging
    from casu_dataset.core.redact import guard_logging

    setup_console_logging()  # here, not in __main__: the `casu` console script comes through main too
    guard_logging()
    from casu_dataset.core.signals import Stopped, restore_signals, stop_on_signals, stopped_exit

    previous = stop_on_signals()
    try:
        if getattr(args, "online", False):  # push: the user's own Hub mode, online by default
            return args.fn(args)
        with hub_offline():
            return args.fn(args)
    except (KeyboardInterrupt, Stopped) as err:
        code, name = stopped_exit(err)
        error(_stopped_line(args, name))
        return code
    except CasuError as err:  # an expected failure: one line (flags named as typed), its exit code
        render = getattr(err, "render", None)
        error(render(args.flag) if render is not None and hasattr(args, "flag") else err)
        return err.exit_code
    except (OSError, MemoryError) as err:  # a full disk, a size limit, no memory: one line, exit 6
        from casu_dataset.core.errors import EXIT_RESOURCE, resource_message

        out = next((f"--{k} {getattr(args, k)}" for k in ("out", "json") if getattr(args, k, None)), None)
        msg = resource_message(err, out)
        if msg is None:
            raise
        error(msg)
        return EXIT_RESOURCE
    finally:
        restore_signals(previous)


def _stopped_line(args, name: str) -> str:
    """What a stopped command kept and what it did not write."""
    out = getattr(args, "out", None)
    if out and args.cmd in ("build", "merge"):  # staged beside --out, swapped in only when complete
        where = f"--out {out} is as it was (the new build was not written)"
    elif out:
        where = f"what --out {out} holds was written whole (no half-written file)"
    else:
        where = "no half-written file was left"
    return f"stopped by {name}: {where}; the caches keep the work done, so the same command resumes"
