"""Crash-safe output files: every file is written to a temp name beside it and renamed into
place (os.replace), so a killed run never leaves a truncated file under a final name; the
temp files of killed runs are removed at the start of the next run in that folder; and
readers (`table`, `push`) only see complete runs: CASU's results JSON (`casu_results_*.json`;
not lm-eval's `results_*.json` beside it) that parses, says it is complete, and whose sample logs
are all there with the recorded SHA-256."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from casu_dataset.core import atomic

if TYPE_CHECKING:
    from harness.run.schema import ResultsDocument

FOREIGN_TMP_AGE_S = 24 * 3600  # a temp in a results folder is stale after a day (a run's writes are short)


def atomic_write(path: str | Path, data: str | bytes) -> None:
    with atomic.atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def clean_stale(root: str | Path) -> list[Path]:
    """Remove temp files left by killed runs in `root` and its model folders; returns them.

    A temp file of a live process (a concurrent run) is kept (casu_dataset.core.atomic's rule)."""
    root = Path(root)
    if not root.is_dir():
        return []
    temps = [*root.glob(atomic.TMP_GLOB), *root.glob("*/" + atomic.TMP_GLOB)]
    return atomic.clean_stale([f for f in temps if f.is_file()], max_age=FOREIGN_TMP_AGE_S)


def file_record(path: Path) -> dict:
    """{file, lines, sha256} of a written sample log, stored in the results JSON."""
    blob = path.read_bytes()
    return {"file": path.name, "lines": blob.count(b"\n"), "sha256": hashlib.sha256(blob).hexdigest()}


def check_run(results_json: Path) -> tuple[ResultsDocument | None, list[Path], str | None]:
    """(document, its sample logs, None) for a complete run, else (None, [], why not)."""
    odd = _not_regular(results_json)
    if odd:
        return None, [], odd
    try:
        # read as CASU's document; the checks below refuse what is not a complete one
        doc: ResultsDocument = json.loads(results_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        return None, [], f"does not parse ({type(err).__name__}: {err})"
    if not isinstance(doc, dict) or doc.get("complete") is not True:
        return (
            None,
            [],
            (
                "not marked complete (written by a killed run or an older harness: rerun the same "
                "command; cached outputs make it fast)"
            ),
        )
    if not isinstance(doc.get("results"), dict):
        return None, [], "has no `results` (not a CASU results document, or cut short)"
    bad = _non_finite(doc["results"], "results")
    if bad:
        return None, [], f"{bad} is not a finite number (the file was edited or damaged): not a score"
    logs = []
    # CASU's sample records, then lm-eval's lines
    for written in (doc.get("sample_logs"), doc.get("lm_eval_sample_logs")):
        for task, rec in (written or {}).items():
            p = results_json.parent / rec["file"]
            if not p.is_file() or _not_regular(p):
                return None, [], f"sample log {rec['file']} is missing (or not a regular file)"
            if hashlib.sha256(p.read_bytes()).hexdigest() != rec["sha256"]:
                return (
                    None,
                    [],
                    f"sample log {rec['file']} is not the one this run wrote (truncated or replaced)",
                )
            logs.append(p)
    return doc, logs, None


def _non_finite(value, where: str) -> str | None:
    """The path of the first NaN or infinite number in a results tree (None: every one finite)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where} = {value}"
    items: list[tuple[object, object]]
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return None
    for k, v in items:
        bad = _non_finite(v, f"{where}.{k}")
        if bad:
            return bad
    return None


def _is_lm_eval_file(path: Path) -> bool:
    """A `results_*.json` in lm-eval's schema (written beside CASU's own `casu_results_*.json`);
    a folder written by an older harness may hold CASU's document under that name (top-level
    `schema_version`). A file that does not parse is not lm-eval's: it is reported as skipped."""
    if _not_regular(path):
        return False
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and "schema_version" not in doc and "results" in doc


def _not_regular(path: Path) -> str | None:
    """Why `path` cannot be read as a results file (a FIFO would block the read, a symlink loop
    raise), or None for a regular file."""
    from casu_dataset.core.paths import PathError, input_path

    try:
        input_path(path, "", "file")
    except PathError as err:
        return str(err).removeprefix(": ")
    return None


def complete_runs(
    output_path: str | Path,
) -> tuple[list[tuple[Path, ResultsDocument, list[Path]]], list[tuple[Path, str]]]:
    """Every complete run under an output folder (oldest first per model) and the skipped ones with why."""
    runs, skipped = [], []
    root = Path(output_path)
    old = [f for f in root.glob("*/results_*.json") if not _is_lm_eval_file(f)]  # older harness versions
    for f in sorted([*root.glob("*/casu_results_*.json"), *old]):
        doc, logs, why = check_run(f)
        if why:
            skipped.append((f, why))
        else:
            assert doc is not None  # check_run gives the document whenever it gives no why
            runs.append((f, doc, logs))
    return runs, skipped


INCOMPLETE_DIR = "incomplete"
_STAMPED = re.compile(
    r"^(?:casu_samples_.+|samples_.+|casu_results|results|lm_eval|accuracy_by_task|ablation_heatmap)_"
    r"(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(?:_\d+)?)\.(?:jsonl|json|md|png)$"
)
WRITER_MARK = ".writing-"  # `.writing-<stamp>-<host>-<pid>`: a run is writing that stamp's files


def set_aside_orphans(model_dir: Path) -> list[Path]:
    """Move the files of runs that never finished (no complete results JSON for their stamp,
    no live writer) into `incomplete/`: a killed run's complete `samples_*.jsonl` beside the
    rerun's made anything that globs the folder see its rows twice. Moved, not deleted."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    host = socket.gethostname()
    live = set()
    for mark in model_dir.glob(f"{WRITER_MARK}*"):
        stamp, h, pid = mark.name[len(WRITER_MARK) :].rsplit("-", 2)
        if h == host and pid.isdigit() and atomic.pid_alive(int(pid)):
            live.add(stamp)
        elif h == host:
            mark.unlink(missing_ok=True)  # its writer is gone
    for mark in model_dir.glob(f"{CLAIM_MARK}*"):  # a stamp claimed by a run about to write it
        owner = _claim_owner(mark)
        if owner is None or owner[0] != host or atomic.pid_alive(owner[1]):
            live.add(mark.name[len(CLAIM_MARK) :])
    done = {
        f.name[len("casu_results_") : -len(".json")]
        for f in model_dir.glob("casu_results_*.json")
        if check_run(f)[0] is not None
    }
    done |= {
        f.name[len("results_") : -len(".json")]
        for f in model_dir.glob("results_*.json")  # older harness
        if not _is_lm_eval_file(f) and check_run(f)[0] is not None
    }
    moved = []
    for f in sorted(model_dir.iterdir()):
        m = _STAMPED.match(f.name)
        if not m or not f.is_file() or m.group(1) in done or m.group(1) in live:
            continue
        dest = model_dir / INCOMPLETE_DIR / f.name
        dest.parent.mkdir(exist_ok=True)
        os.replace(f, dest)
        moved.append(dest)
    return moved


CLAIM_MARK = ".claim-"  # `.claim-<stamp>` (holding `<host> <pid>`): a run has taken that stamp


def _claim_owner(mark: Path) -> tuple[str, int] | None:
    try:
        host, pid = mark.read_text().split()
        return host, int(pid)
    except (OSError, ValueError):
        return None


class claimed_stamp:
    """The stamp a run's files are named with, claimed atomically in `model_dir`: the first of
    `base`, `base_2`, `base_3`, ... that no complete run uses (`taken(stamp)`) and whose claim file
    this process created (O_CREAT | O_EXCL), so runs started together into one folder never share
    a file name. The claim is released when the block ends (the files are there by then)."""

    def __init__(self, model_dir: Path, base: str, taken):
        self.dir, self.base, self.taken = Path(model_dir), base, taken
        self.mark: Path | None = None

    def __enter__(self) -> str:
        me = f"{socket.gethostname()} {os.getpid()}"
        n, stamp = 1, self.base
        while True:
            if not self.taken(stamp):
                mark = self.dir / f"{CLAIM_MARK}{stamp}"
                try:
                    fd = os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    owner = _claim_owner(mark)
                    if (
                        owner is not None
                        and owner[0] == socket.gethostname()
                        and not atomic.pid_alive(owner[1])
                    ):
                        mark.unlink(missing_ok=True)  # left by a killed run: free again
                        continue
                else:
                    try:
                        with os.fdopen(fd, "w") as f:
                            f.write(me)
                    except OSError:  # a full disk: the empty claim goes, the error is the run's
                        mark.unlink(missing_ok=True)
                        raise
                    if not self.taken(stamp):  # not released by a run that wrote it meanwhile
                        self.mark = mark
                        return stamp
                    mark.unlink(missing_ok=True)
            n += 1
            stamp = f"{self.base}_{n}"  # sorts after the first: "_" > "."

    def __exit__(self, *exc):
        if self.mark is not None:
            self.mark.unlink(missing_ok=True)


class writing:
    """Marks `stamp` as being written by this process (so a concurrent run leaves its files be)."""

    def __init__(self, model_dir: Path, stamp: str):
        self.mark = Path(model_dir) / f"{WRITER_MARK}{stamp}-{socket.gethostname()}-{os.getpid()}"

    def __enter__(self):
        self.mark.touch()
        return self

    def __exit__(self, *exc):
        self.mark.unlink(missing_ok=True)


# -- where a run's files go ------------------------------------------------------------------


def sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "__", name)


def checkpoint(model: Mapping[str, Any]) -> str | None:
    """The checkpoint a run evaluated: --model_args pretrained= (or an API adapter's model=)."""
    args = model.get("args") or {}
    ck = args.get("pretrained") or args.get("model")
    return str(ck) if ck else None


def run_key(model: Mapping[str, Any]) -> str:
    """The results folder of a model: sanitized adapter name plus checkpoint, e.g.
    `qwen2.5-omni__Qwen__Qwen2.5-Omni-7B`, so two checkpoints of one adapter never share files."""
    key = sanitize(model["name"])
    ck = checkpoint(model)
    if ck:
        key += "__" + sanitize(ck.strip("/\\")).strip("_")
    if len(key) > 120:  # a long local path: keep the readable tail, disambiguated by a hash
        key = key[:60] + "__" + hashlib.sha256(key.encode()).hexdigest()[:10] + "__" + key[-40:]
    return key
