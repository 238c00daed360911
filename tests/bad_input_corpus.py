"""The rules the bad-input corpora share (test_harness_errors, test_build_errors,
test_review_errors, test_hub_errors, test_key_redaction, test_dataset_loading).

A corpus is a table of cases `(id, run(ctx) -> Outcome, expectation)`. Each case must end in a
named error (the exit code the --help epilog documents, and a message naming the file, field or
flag and why), a counted skip, or the right result. A traceback, an error that exits 0 or a
message that does not name what was wrong fails the case; the failure message starts with
TRACEBACK, SILENT or UNNAMED so a run can be counted.

Everything runs in-process (the CLIs' `main(argv)`) on tiny real parquet folders, so a whole
corpus takes seconds. The `corpus_ctx` fixture (conftest.py) gives each corpus file its `Ctx`."""

from __future__ import annotations

import contextlib
import io
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from conftest import tiny_dataset
from helpers import harness_argv

ROOT = Path(__file__).resolve().parents[1]
TASK_YAML = ROOT / "tasks" / "role_inference.yaml"
ROLE = "role_inference"
SHARD = f"{ROLE}/test-00000-of-00001.parquet"


@dataclass
class Outcome:
    code: int | None  # exit code; None when an exception escaped
    out: str = ""
    crash: str = ""  # the escaped traceback, if any

    @property
    def text(self) -> str:
        return self.out + self.crash


class Hang(BaseException):  # not an Exception: broad handlers in the code under test must not swallow it
    pass


@contextlib.contextmanager
def deadline(seconds: float):
    """A bad input must be refused quickly, not run a build: past the deadline the case fails."""
    import signal

    def fire(*_):
        raise Hang(f"still running after {seconds} s (the bad input was not refused up front)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # and again each second, should one be swallowed
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


DEADLINE_S = float(os.environ.get("CASU_CASE_DEADLINE", "60"))


def call(fn, *args) -> Outcome:
    """Run a CLI main(argv) (or any callable) capturing its output; SystemExit is an exit code."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), deadline(DEADLINE_S):
            rc = fn(*args)
    except Hang as e:
        return Outcome(0, buf.getvalue() + f"\nHANG: {e}")
    except SystemExit as e:
        if isinstance(e.code, str):
            buf.write(e.code)
        rc = e.code if isinstance(e.code, int) else (1 if e.code else 0)
    except Exception:  # noqa: BLE001 - that is what the corpus counts
        return Outcome(None, buf.getvalue(), traceback.format_exc())
    return Outcome(0 if rc is None else rc, buf.getvalue())


def expect_error(fn, exc_type, *args) -> Outcome:
    """A library call that must raise `exc_type` (a named error): exit 2 with its message."""
    try:
        fn(*args)
    except exc_type as err:
        return Outcome(2, f"{type(err).__name__}: {err}")
    except Exception:  # noqa: BLE001
        return Outcome(None, "", traceback.format_exc())
    return Outcome(0, "(no error)")


def harness(*argv) -> Outcome:
    from harness.cli import main

    return call(main, list(argv))


def casu(*argv) -> Outcome:
    from casu_dataset.cli import main

    return call(main, list(argv))


@dataclass
class Ctx:
    root: Path
    ds: Path
    tmp: Path = None
    extra: dict = field(default_factory=dict)

    def run(self, *argv, model="random", tasks="role_inference", ds=None) -> Outcome:
        return harness(*harness_argv(ds or self.ds, self.tmp / "res", *argv, model=model, tasks=tasks))


# -- the expectations and their verdicts -----------------------------------------------------------
# expectation: ("error", exit code, needles...) | ("skip", needles...) | ("ok", needles...)
E, SKIP, OK = "error", "skip", "ok"


def classify(o: Outcome, expect) -> tuple[str, str]:
    if o.code is None or "Traceback (most recent call last)" in o.text:
        return "TRACEBACK", o.text[-1500:]
    kind = expect[0]
    if kind == E:
        if o.code == 0:
            return "SILENT", o.text[-800:]
        missing = [n for n in expect[2:] if n not in o.text]
        if o.code != expect[1] or missing:
            return "UNNAMED", f"exit {o.code} (want {expect[1]}), missing {missing}: {o.text[-800:]}"
        return "named", ""
    if o.code != 0:
        return "SILENT", o.text[-800:]
    missing = [n for n in expect[1:] if n not in o.text]
    if missing:
        return "UNNAMED", f"missing {missing}: {o.text[-800:]}"
    return ("skip" if kind == SKIP else "ok"), ""


def check_case(ctx: Ctx, tmp_path: Path, case_id: str, run, expect) -> None:
    """Run one case in a fresh temp folder; fail unless it was named, skipped or right."""
    ctx.tmp = tmp_path
    verdict, detail = classify(run(ctx), expect)
    assert verdict in ("named", "skip", "ok"), f"{verdict}: {case_id}: {detail}"


def duplicate_ids(cases) -> list[str]:
    ids = [c[0] for c in cases]
    return sorted({i for i in ids if ids.count(i) > 1})


# -- things with one thing wrong, used by several corpora -----------------------------------------


def write_task(d: Path, name: str = "my_role", **edit) -> Path:
    """A task YAML folder: the shipped role_inference task renamed `name`, with `edit` applied."""
    data = yaml.safe_load(TASK_YAML.read_text()) | {"task": name} | edit
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return d


def table_edit(c: Ctx, name: str, fn, n: int = 3) -> Path:
    """A tiny dataset whose role_inference table went through `fn(table) -> table`."""
    d = tiny_dataset(c.tmp / name, n, name)
    f = d / SHARD
    pq.write_table(fn(pq.read_table(f)), f)
    return d


def setcol(name: str, values, typ=None):
    """A table edit: column `name` replaced by `values` (a list, or a function of the table)."""

    def fn(t):
        arr = pa.array(values(t) if callable(values) else values, type=typ)
        return t.set_column(t.column_names.index(name), name, arr)

    return fn


def truncated(c: Ctx, name: str, keep: int = 100) -> Path:
    """A tiny dataset whose parquet files are cut to their first `keep` bytes."""
    d = tiny_dataset(c.tmp / name, 2, name)
    for f in d.rglob("*.parquet"):
        f.write_bytes(f.read_bytes()[:keep])
    return d
