"""Issue 18: a corpus of bad inputs to the harness, the dataset CLI, the review decisions and the
timeline. Each case must end in a named error (the exit code the --help epilog documents, and a
message naming the file/field/flag and why), a counted skip, or -- for inputs that used to give
a silently wrong result -- the right result. A traceback or a silent wrong result fails the case;
the failure message starts with TRACEBACK, SILENT or UNNAMED so a run can be counted.

Everything runs in-process (the CLIs' `main(argv)`) on tiny real parquet folders, so the
whole corpus takes seconds."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from test_harness_integrity import tiny_dataset

ROOT = Path(__file__).resolve().parents[1]
TASK_YAML = ROOT / "tasks" / "role_inference.yaml"


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
        return harness(
            "--model",
            model,
            "--tasks",
            tasks,
            "--dataset",
            str(ds or self.ds),
            "--output_path",
            str(self.tmp / "res"),
            "--quiet",
            "--no_probe",
            *argv,
        )


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Ctx:
    root = tmp_path_factory.mktemp("bad_inputs")
    c = Ctx(root, tiny_dataset(root / "ds", 4, "b"))
    c.tmp = root
    assert c.run().code == 0  # the base command works: every case below changes one thing
    c.extra["results"] = root / "res"
    return c


# -- helpers that make one bad thing each -------------------------------------------------------


def write_task(d: Path, name: str = "my_role", **edit) -> Path:
    data = yaml.safe_load(TASK_YAML.read_text()) | {"task": name} | edit
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return d


def dataset_variant(c: Ctx, name: str, answer="A", drop=None, options=None) -> Path:
    d = tiny_dataset(c.tmp / name, 2, name, answer=answer)
    f = d / "role_inference" / "test-00000-of-00001.parquet"
    t = pq.read_table(f)
    if drop:
        t = t.drop_columns(drop)
    if options is not None:
        import pyarrow as pa

        t = t.set_column(t.column_names.index("options"), "options", pa.array([options] * len(t)))
    pq.write_table(t, f)
    return d


def timeline_case(offset: float):
    from casu_dataset.script.schema import load_script
    from casu_dataset.script.timeline import TimelineError, TimingConfig, resolve

    s = load_script(ROOT / "casu_dataset" / "scenarios" / "examples" / "storm_monologue.yaml")
    d = s.model_dump(mode="json")
    d["events"][1]["anchor"]["offset"] = offset
    s2 = type(s).model_validate(d)

    def run():
        tl = resolve(s2, [2.0, 3.0], [1.0, 1.5], np.random.default_rng(0), TimingConfig())
        return tl

    return expect_error(run, TimelineError)


def decision(**rec):
    from casu_dataset.review.decisions import DecisionError, validate

    base = {"reviewer": "ann", "kind": "question", "item": "s/q1", "action": "accept"}
    return expect_error(validate, DecisionError, {**base, **rec})


def decision_raw(rec):
    from casu_dataset.review.decisions import DecisionError, validate

    return expect_error(validate, DecisionError, rec)


def edit(**e):
    base = {"question": "Which sound?", "options": ["a bell", "a siren", "a dog", "rain"], "answer": "A"}
    return decision(action="edit", edit={**base, **e})


def decisions_file(c: Ctx, *lines) -> Outcome:
    """A decisions file with hand-written bad lines: load reports each by line number, keeps the rest."""
    from casu_dataset.review.decisions import load

    f = c.tmp / "d.jsonl"
    good = {
        "time": "2026-01-01T00:00:00+00:00",
        "reviewer": "ann",
        "kind": "question",
        "item": "s/q1",
        "action": "accept",
    }
    f.write_text("\n".join([json.dumps(good), *(json.dumps({**good, **x}) for x in lines)]) + "\n")
    try:
        rv = load(f)
    except Exception:  # noqa: BLE001
        return Outcome(None, "", traceback.format_exc())
    msg = "\n".join(m for _, m in rv.bad_lines)
    # a counted skip: each bad line named, the good one kept
    ok = len(rv.bad_lines) == len(lines) and rv.status("question", "s/q1") == "accept"
    return Outcome(0 if ok else 1, f"skipped {len(rv.bad_lines)} line(s):\n{msg}")


def apply_unknown(c: Ctx) -> Outcome:
    """Decisions for items not in the build: listed as unknown, never counted as reviewed."""
    from casu_dataset.review.apply import apply_review
    from casu_dataset.review.decisions import DecisionLog

    log = DecisionLog(c.tmp / "u.jsonl")
    log.append({"reviewer": "ann", "kind": "question", "item": "ghost/q9", "action": "reject"})
    log.append({"reviewer": "ann", "kind": "scene", "item": "ghost", "action": "reject"})
    log.append({"reviewer": "ann", "kind": "question", "item": "s0/q0", "action": "accept"})
    rows = {
        "scenes": [{"scene_id": "s0"}],
        "role_inference": [{"id": "s0/q0", "scene_id": "s0", "task": "role_inference"}],
    }
    res = apply_review(rows, log.review())
    out = json.dumps({k: res.get(k) for k in ("reviewed", "rejected", "unknown")})
    ok = (
        res["reviewed"] == 1
        and res["rejected"] == 0
        and sorted(res.get("unknown", [])) == ["question ghost/q9", "scene ghost"]
    )
    return Outcome(0 if ok else 1, f"skipped unknown items: {out}")


def include_path_runs_builtins_too(c: Ctx) -> Outcome:
    d = write_task(c.tmp / "inc")
    o = c.run("--include_path", str(d), "--limit", "2", tasks="all")
    res = sorted((c.tmp / "res").glob("*/casu_results_*.json"))
    if o.code not in (0,) or not res:
        return o
    tasks = json.loads(res[-1].read_text())["config"]["tasks"]
    ok = "my_role" in tasks and "contextual_reasoning" in tasks and "role_inference" in tasks
    return Outcome(0 if ok else 1, f"tasks run: {tasks}")


def limit_takes_first_n(c: Ctx, n: int) -> Outcome:
    o = c.run("--limit", str(n))
    if o.code != 0:
        return o
    res = sorted((c.tmp / "res").glob("*/casu_results_*.json"))[-1]
    got = (
        json.loads(res.read_text())["evaluated"]["samples"]
        if "evaluated" in json.loads(res.read_text())
        else None
    )
    return Outcome(0 if got == n else 1, f"--limit {n}: evaluated {got} samples")


def non_utf8_task(c: Ctx, via_run: bool) -> Outcome:
    d = c.tmp / "latin1"
    d.mkdir()
    (d / "my_role.yaml").write_bytes(
        TASK_YAML.read_text().replace("task: role_inference", "task: my_role").encode()
        + "\ndescription: caf\xe9\n".encode("latin-1")
    )
    return c.run("--include_path", str(d)) if via_run else harness("validate", str(d / "my_role.yaml"))


def cache_variant(c: Ctx, kind: str) -> Outcome:
    p = c.tmp / "cache"
    if kind == "dir":
        p.mkdir()
    elif kind == "garbage":
        p.write_bytes(b"this is not a database" * 100)
    elif kind == "missing_parent":
        return _cache_ok(c, c.tmp / "no" / "such" / "cache.sqlite")
    return c.run("--cache", str(p))


def _cache_ok(c: Ctx, p: Path) -> Outcome:
    o = c.run("--cache", str(p))  # a new cache in a new folder is fine: it is created
    return Outcome(
        0
        if o.code == 0 and sqlite3.connect(p).execute("select count(*) from responses").fetchone()[0]
        else 1,
        o.out,
    )


def push_offline(c: Ctx) -> Outcome:
    from harness.cli import main

    old = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    os.environ.update(HF_HUB_OFFLINE="1", HF_TOKEN="hf_FAKEtokenFAKEtokenFAKEtoken1234")
    try:
        return call(main, ["push", "--repo", "me/results", "--output_path", str(c.extra["results"])])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def hub_offline(c: Ctx) -> Outcome:
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        return c.run(ds="nobody-here/no-such-dataset")
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def garbage_audio_dataset(c: Ctx) -> Path:
    import pyarrow as pa

    d = c.tmp / "garbage_audio"
    ann = {"scene_id": "s0", "sample_rate": 16000, "turns": [], "events": []}
    row = {
        "scene_id": "s0",
        "audio": {"bytes": b"not audio at all", "path": "s0.flac"},
        "annotation": json.dumps(ann),
    }
    (d / "scenes").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row]), d / "scenes" / "test-00000-of-00001.parquet")
    return d


def merge_case(c: Ctx, kind: str) -> Outcome:
    d = c.tmp / "shard"
    d.mkdir()
    if kind == "no_report":
        (d / "hello.txt").write_text("hi")
    elif kind == "bad_json":
        (d / "build_report.json").write_text("{not json")
    elif kind == "no_settings":
        (d / "build_report.json").write_text(json.dumps({"built": []}))
    elif kind == "list":
        (d / "build_report.json").write_text("[1, 2]")
    return casu("merge", "--out", str(c.tmp / "merged"), str(d))


def regenerate_case(c: Ctx, kind: str) -> Outcome:
    f = c.tmp / "annotation.json"
    if kind == "not_json":
        f.write_text("{{{")
    elif kind == "not_casu":
        f.write_text(json.dumps({"hello": 1}))
    elif kind == "list":
        f.write_text("[]")
    elif kind == "dir":
        f.mkdir()
    return casu("regenerate", str(f))


def timeline_cli(c: Ctx, kind: str) -> Outcome:
    if kind == "garbage_audio":
        d = garbage_audio_dataset(c)
        return casu("timeline", "--dataset", str(d), "--scene", "s0", "--out", str(c.tmp / "t.png"))
    if kind == "missing":
        return casu(
            "timeline", "--dataset", str(c.tmp / "nope"), "--scene", "s0", "--out", str(c.tmp / "t.png")
        )
    if kind == "no_scene":
        d = garbage_audio_dataset(c)
        return casu("timeline", "--dataset", str(d), "--scene", "other", "--out", str(c.tmp / "t.png"))
    if kind == "bad_annotation":
        import pyarrow as pa

        from casu_dataset.core.audio_io import encode_flac

        d = c.tmp / "bad_ann"
        (d / "scenes").mkdir(parents=True)
        row = {
            "scene_id": "s0",
            "audio": {"bytes": encode_flac(np.zeros(1600, "float32")), "path": "x"},
            "annotation": "{not json",
        }
        pq.write_table(pa.Table.from_pylist([row]), d / "scenes" / "test-00000-of-00001.parquet")
        return casu("timeline", "--dataset", str(d), "--scene", "s0", "--out", str(c.tmp / "t.png"))
    raise ValueError(kind)


def build(c: Ctx, *argv) -> Outcome:
    return casu("build", "--out", str(c.tmp / "built"), *argv)


def model_args(c: Ctx, text: str, model="random") -> Outcome:
    return c.run("--model_args", text, model=model)


def secret_in_error(c: Ctx) -> Outcome:
    """A key and a bearer token in an error line are redacted (a server echoing the key end to end
    is in test_review_security)."""
    from casu_dataset.core.redact import redact

    key = "sk-live-abcdefghijklmnopqrstuvwx"
    msg = redact(f"HTTP 401: Incorrect API key provided: {key}. Authorization: Bearer {key}")
    return Outcome(2 if key not in msg and "Incorrect API key" in msg else 0, msg)


# -- the corpus: (id, run(ctx) -> Outcome, expectation) ----------------------------------------
# expectation: ("error", exit code, needles...) | ("skip", needles...) | ("ok", needles...)
E, SKIP, OK = "error", "skip", "ok"

CASES = [
    # harness: files and folders
    ("harness-cache-is-folder", lambda c: cache_variant(c, "dir"), (E, 2, "--cache", "is a folder")),
    ("harness-cache-not-sqlite", lambda c: cache_variant(c, "garbage"), (E, 2, "--cache", "not a SQLite")),
    ("harness-cache-new-folder-created", lambda c: cache_variant(c, "missing_parent"), (OK,)),
    (
        "harness-output-path-is-file",
        lambda c: (
            (c.tmp / "f").write_text("x")
            and harness(
                "--model",
                "random",
                "--tasks",
                "role_inference",
                "--dataset",
                str(c.ds),
                "--output_path",
                str(c.tmp / "f"),
                "--quiet",
            )
        ),
        (E, 2, "--output_path", "is a file"),
    ),
    (
        "harness-output-path-under-file",
        lambda c: (
            (c.tmp / "f").write_text("x")
            and harness(
                "--model",
                "random",
                "--tasks",
                "role_inference",
                "--dataset",
                str(c.ds),
                "--output_path",
                str(c.tmp / "f" / "sub"),
                "--quiet",
            )
        ),
        (E, 2, "--output_path"),
    ),
    ("harness-hub-id-offline", hub_offline, (E, 2, "--dataset nobody-here/no-such-dataset", "offline")),
    (
        "harness-dataset-missing-folder",
        lambda c: c.run(ds=str(c.tmp / "nope")),
        (E, 2, "--dataset", "no such folder"),
    ),
    (
        "harness-dataset-empty-folder",
        lambda c: (c.tmp / "empty").mkdir() or c.run(ds=str(c.tmp / "empty")),
        (E, 2, "--dataset", "no parquet files"),
    ),
    (
        "harness-dataset-truncated-parquet",
        lambda c: (
            lambda d: (
                (d / "role_inference" / "test-00000-of-00001.parquet").write_bytes(b"PAR1 x")
                and c.run(ds=str(d))
            )
        )(tiny_dataset(c.tmp / "t", 2, "t")),
        (E, 2, "not a readable parquet"),
    ),
    (
        "harness-answer-letter-E",
        lambda c: c.run(ds=str(dataset_variant(c, "ae", answer="E"))),
        (E, 2, "row 0", "answer 'E'"),
    ),
    (
        "harness-answer-letter-AB",
        lambda c: c.run(ds=str(dataset_variant(c, "aab", answer="AB"))),
        (E, 2, "row 0", "answer 'AB'"),
    ),
    (
        "harness-answer-empty",
        lambda c: c.run(ds=str(dataset_variant(c, "aempty", answer=""))),
        (E, 2, "row 0", "answer ''"),
    ),
    (
        "harness-answer-lowercase",
        lambda c: c.run(ds=str(dataset_variant(c, "alow", answer="a"))),
        (E, 2, "row 0", "answer 'a'"),
    ),
    (
        "harness-no-options-column",
        lambda c: c.run(ds=str(dataset_variant(c, "noopt", drop=["options"]))),
        (E, 2, "no column(s) ['options']"),
    ),
    (
        "harness-no-answer-column",
        lambda c: c.run(ds=str(dataset_variant(c, "noans", drop=["answer"]))),
        (E, 2, "no column(s) ['answer']"),
    ),
    (
        "harness-no-audio-column",
        lambda c: c.run(ds=str(dataset_variant(c, "noaud", drop=["audio"]))),
        (E, 2, "no column(s) ['audio']"),
    ),
    (
        "harness-empty-options",
        lambda c: c.run(ds=str(dataset_variant(c, "eopt", options=[]))),
        (E, 2, "row 0", "0 option(s)"),
    ),
    (
        "harness-two-options-answer-C",
        lambda c: c.run(ds=str(dataset_variant(c, "twoopt", answer="C", options=["x", "y"]))),
        (E, 2, "row 0", "answer 'C'"),
    ),
    # harness: numeric flags
    ("harness-limit-0", lambda c: c.run("--limit", "0"), (E, 2, "--limit", ">= 1")),
    ("harness-limit-negative", lambda c: c.run("--limit", "-2"), (E, 2, "--limit", ">= 1")),
    ("harness-limit-text", lambda c: c.run("--limit", "ten"), (E, 2, "--limit", "'ten'")),
    ("harness-limit-float", lambda c: c.run("--limit", "1.5"), (E, 2, "--limit", "'1.5'")),
    ("harness-limit-2-runs-2", lambda c: limit_takes_first_n(c, 2), (OK,)),
    ("harness-batch-size-0", lambda c: c.run("--batch_size", "0"), (E, 2, "--batch_size", ">= 1")),
    ("harness-batch-size-negative", lambda c: c.run("--batch_size", "-3"), (E, 2, "--batch_size", ">= 1")),
    ("harness-batch-size-text", lambda c: c.run("--batch_size", "big"), (E, 2, "--batch_size", "'big'")),
    ("harness-seed-text", lambda c: c.run("--seed", "abc"), (E, 2, "--seed", "'abc'")),
    ("harness-seed-float", lambda c: c.run("--seed", "1.5"), (E, 2, "--seed", "'1.5'")),
    ("harness-seed-negative", lambda c: c.run("--seed", "-1"), (E, 2, "--seed", ">= 0")),
    # harness: lm-eval flags (issue 17)
    ("harness-limit-1.0-is-1", lambda c: c.run("--limit", "1.0"), (OK, "n=1")),
    ("harness-limit-fraction-zero", lambda c: c.run("--limit", "0.0"), (E, 2, "--limit", "(0, 1)")),
    ("harness-limit-fraction-nan", lambda c: c.run("--limit", "nan"), (E, 2, "--limit", "'nan'")),
    (
        "harness-batch-size-auto-typo",
        lambda c: c.run("--batch_size", "Auto"),
        (E, 2, "--batch_size", "'Auto'"),
    ),
    (
        "harness-gen-kwargs-unknown-key",
        lambda c: c.run("--gen_kwargs", "top_k=5"),
        (E, 2, "--gen_kwargs top_k", "not a generation setting"),
    ),
    (
        "harness-gen-kwargs-not-kv",
        lambda c: c.run("--gen_kwargs", "greedy"),
        (E, 2, "--gen_kwargs", "not key=value"),
    ),
    (
        "harness-gen-kwargs-bad-int",
        lambda c: c.run("--gen_kwargs", "max_new_tokens=lots"),
        (E, 2, "--gen_kwargs max_new_tokens", "integer"),
    ),
    (
        "harness-gen-kwargs-zero-tokens",
        lambda c: c.run("--gen_kwargs", "max_new_tokens=0"),
        (E, 2, "--gen_kwargs max_new_tokens", "greater than or equal to 1"),
    ),
    (
        "harness-gen-kwargs-temp-greedy",
        lambda c: c.run("--gen_kwargs", "temperature=0.7"),
        (E, 2, "--gen_kwargs", "do_sample"),
    ),
    (
        "harness-gen-kwargs-bad-bool",
        lambda c: c.run("--gen_kwargs", "do_sample=perhaps"),
        (E, 2, "--gen_kwargs do_sample", "bool"),
    ),
    ("harness-verbosity-unknown", lambda c: c.run("--verbosity", "LOUD"), (E, 2, "--verbosity", "'LOUD'")),
    (
        "harness-hub-log-args-unknown",
        lambda c: c.run("--hf_hub_log_args", "colour=red"),
        (E, 2, "--hf_hub_log_args colour", "unknown key"),
    ),
    (
        "harness-hub-log-args-bad-bool",
        lambda c: c.run("--hf_hub_log_args", "public_repo=maybe"),
        (E, 2, "--hf_hub_log_args public_repo", "true or false"),
    ),
    (
        "harness-hub-log-args-bad-org",
        lambda c: c.run("--hf_hub_log_args", "hub_results_org=a b"),
        (E, 2, "--hf_hub_log_args", "ORG/NAME"),
    ),
    ("harness-device-bogus", lambda c: c.run("--device", "gpu0"), (E, 2, "--device 'gpu0'", "cuda")),
    ("harness-tasks-list-no-model", lambda c: harness("--tasks", "list"), (OK,)),
    ("harness-no-model", lambda c: harness("--tasks", "role_inference"), (E, 2, "--model")),
    # harness: --model_args, typed by the adapter's signature, before anything loads
    (
        "model-args-seed-text",
        lambda c: model_args(c, "seed=abc"),
        (E, 2, "--model_args seed='abc'", "integer"),
    ),
    (
        "model-args-seed-float",
        lambda c: model_args(c, "seed=1.5"),
        (E, 2, "--model_args seed='1.5'", "integer"),
    ),
    ("model-args-seed-negative", lambda c: model_args(c, "seed=-4"), (E, 2, "--model_args seed", ">= 0")),
    (
        "model-args-seed-bool",
        lambda c: model_args(c, "seed=true"),
        (E, 2, "--model_args seed='true'", "integer"),
    ),
    (
        "model-args-unknown-key",
        lambda c: model_args(c, "colour=red"),
        (E, 2, "--model_args colour", "random takes"),
    ),
    ("model-args-not-key-value", lambda c: model_args(c, "seed"), (E, 2, "--model_args", "not key=value")),
    ("model-args-empty-key", lambda c: model_args(c, "=3"), (E, 2, "--model_args", "empty key")),
    ("model-args-twice", lambda c: model_args(c, "seed=1,seed=2"), (E, 2, "--model_args seed", "twice")),
    (
        "model-args-concurrency-lots",
        lambda c: model_args(c, "model=m,concurrency=lots", "openai-audio"),
        (E, 2, "--model_args concurrency='lots'", "integer"),
    ),
    (
        "model-args-concurrency-0",
        lambda c: model_args(c, "model=m,concurrency=0", "openai-audio"),
        (E, 2, "--model_args concurrency", ">= 1"),
    ),
    (
        "model-args-timeout-text",
        lambda c: model_args(c, "model=m,timeout=soon", "openai-audio"),
        (E, 2, "--model_args timeout='soon'", "number"),
    ),
    (
        "model-args-timeout-negative",
        lambda c: model_args(c, "model=m,timeout=-5", "openai-audio"),
        (E, 2, "--model_args timeout", "> 0"),
    ),
    (
        "model-args-timeout-nan",
        lambda c: model_args(c, "model=m,timeout=nan", "openai-audio"),
        (E, 2, "--model_args timeout", "finite"),
    ),
    (
        "model-args-backoff-text",
        lambda c: model_args(c, "model=m,backoff=x", "openai-audio"),
        (E, 2, "--model_args backoff='x'", "number"),
    ),
    (
        "model-args-max-retries-negative",
        lambda c: model_args(c, "model=m,max_retries=-1", "openai-audio"),
        (E, 2, "--model_args max_retries", ">= 0"),
    ),
    (
        "model-args-max-retries-float",
        lambda c: model_args(c, "model=m,max_retries=2.5", "openai-audio"),
        (E, 2, "--model_args max_retries='2.5'", "integer"),
    ),
    (
        "model-args-openai-unknown",
        lambda c: model_args(c, "model=m,temprature=1", "openai-audio"),
        (E, 2, "--model_args temprature", "openai-audio takes"),
    ),
    ("model-args-cascade-unknown", lambda c: model_args(c, "bogus=1", "cascade"), (E, 2, "bogus")),
    (
        "model-args-hf-bool-text",
        lambda c: model_args(c, "trust_remote_code=maybe", "qwen2-audio"),
        (E, 2, "--model_args trust_remote_code='maybe'", "true or false"),
    ),
    ("model-unknown", lambda c: c.run(model="gpt-17"), (E, 3, "--model 'gpt-17'", "unknown model")),
    (
        "model-plugin-unimportable",
        lambda c: c.run(model="no_such_mod:Cls"),
        (E, 3, "--model 'no_such_mod:Cls'"),
    ),
    ("model-openai-no-model-name", lambda c: model_args(c, "concurrency=2", "openai-audio"), (E, 3, "model")),
    # harness: tasks
    ("tasks-unknown", lambda c: c.run(tasks="nope"), (E, 2, "--tasks 'nope'", "no such task")),
    ("tasks-empty", lambda c: c.run(tasks=","), (E, 2, "--tasks", "nothing selected")),
    ("tasks-all-plus-include-path", include_path_runs_builtins_too, (OK,)),
    (
        "include-path-missing",
        lambda c: c.run("--include_path", str(c.tmp / "nope")),
        (E, 2, "--include_path", "not a folder"),
    ),
    (
        "include-path-redefines-builtin",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "dup", "role_inference"))),
        (E, 2, "role_inference.yaml", "defined twice"),
    ),
    ("task-yaml-non-utf8-run", lambda c: non_utf8_task(c, True), (E, 2, "my_role.yaml", "UTF-8")),
    ("task-yaml-non-utf8-validate", lambda c: non_utf8_task(c, False), (E, 2, "my_role.yaml", "UTF-8")),
    (
        "task-yaml-invalid",
        lambda c: (
            (c.tmp / "i").mkdir()
            or (c.tmp / "i" / "x.yaml").write_text("a: [")
            and c.run("--include_path", str(c.tmp / "i"))
        ),
        (E, 2, "x.yaml", "not valid YAML"),
    ),
    (
        "task-yaml-list",
        lambda c: (
            (c.tmp / "i").mkdir()
            or (c.tmp / "i" / "x.yaml").write_text("- 1")
            and c.run("--include_path", str(c.tmp / "i"))
        ),
        (E, 2, "x.yaml", "mapping"),
    ),
    (
        "task-yaml-unknown-field",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "u", colour="red"))),
        (E, 2, "my_role.yaml", "colour"),
    ),
    (
        "task-yaml-bad-metric",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "m", metrics=["f1"]))),
        (E, 2, "my_role.yaml", "metrics", "f1"),
    ),
    (
        "task-yaml-bad-placeholder",
        lambda c: c.run(
            "--include_path", str(write_task(c.tmp / "p", prompt_template="{question} {options} {nope}"))
        ),
        (E, 2, "my_role.yaml", "nope"),
    ),
    (
        "task-yaml-version-text",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "v", version="one"))),
        (E, 2, "my_role.yaml", "version"),
    ),
    (
        "task-yaml-max-new-tokens-0",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "g", generation={"max_new_tokens": 0}))),
        (E, 2, "my_role.yaml", "max_new_tokens"),
    ),
    (
        "task-yaml-temperature-text",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "g", generation={"temperature": "hot"}))),
        (E, 2, "my_role.yaml", "temperature"),
    ),
    (
        "task-yaml-name-mismatch",
        lambda c: (
            lambda d: [(d / "my_role.yaml").rename(d / "other.yaml")] and c.run("--include_path", str(d))
        )(write_task(c.tmp / "n")),
        (E, 2, "other.yaml", "must match the file name"),
    ),
    (
        "validate-missing-file",
        lambda c: harness("validate", str(c.tmp / "nope.yaml")),
        (E, 2, "nope.yaml", "cannot read"),
    ),
    # harness: other flags
    ("conditions-unknown", lambda c: c.run("--conditions", "XYZ"), (E, 2, "--conditions 'XYZ'")),
    ("scoring-unknown", lambda c: c.run("--scoring", "vibes"), (E, 2, "--scoring", "vibes")),
    ("judge-unknown", lambda c: c.run("--judge", "oracle"), (E, 2, "--judge 'oracle'")),
    ("table-missing-folder", lambda c: harness("table", str(c.tmp / "nope")), (E, 2, "nope", "no complete")),
    (
        "table-folder-of-junk",
        lambda c: (
            (c.tmp / "j" / "m").mkdir(parents=True)
            or (c.tmp / "j" / "m" / "results_1.json").write_text("{")
            and harness("table", str(c.tmp / "j"))
        ),
        (E, 2, "no complete"),
    ),
    ("push-offline", push_offline, (E, 5, "me/results", "offline")),
    (
        "push-public-typo",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.extra["results"]), "--publik"),
        (E, 2, "--publik"),
    ),
    (
        "pr-eval-results-bad-model-repo",
        lambda c: harness(
            "pr-eval-results",
            "--model_repo",
            "noslash",
            "--dataset_id",
            "a/b",
            "--output_path",
            str(c.extra["results"]),
            "--dry_run",
        ),
        (E, 2, "--model_repo 'noslash'"),
    ),
    (
        "pr-eval-results-no-dataset-id",
        lambda c: harness("pr-eval-results", "--model_repo", "a/b", "--output_path", str(c.extra["results"])),
        (E, 2, "--dataset_id"),
    ),
    (
        "pr-eval-results-no-results",
        lambda c: harness(
            "pr-eval-results",
            "--model_repo",
            "a/b",
            "--dataset_id",
            "c/d",
            "--output_path",
            str(c.tmp),
            "--dry_run",
        ),
        (E, 2, "--output_path", "no complete results"),
    ),
    (
        "push-bad-repo",
        lambda c: harness("push", "--repo", "noslash", "--output_path", str(c.extra["results"]), "--dry_run"),
        (E, 2, "--repo 'noslash'"),
    ),
    (
        "push-no-results",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.tmp), "--dry_run"),
        (E, 2, "--output_path", "no complete results"),
    ),
    (
        "push-output-path-missing",
        lambda c: harness("push", "--repo", "me/r", "--output_path", str(c.tmp / "nope"), "--dry_run"),
        (E, 2, "--output_path", "no complete results"),
    ),
    ("redact-key-in-error", secret_in_error, (E, 2, "Incorrect API key")),
    # casu_dataset build and friends
    (
        "build-scenarios-missing",
        lambda c: build(c, "--scenarios", str(c.tmp / "nope.yaml")),
        (E, 2, "--scenarios", "no such file"),
    ),
    (
        "build-scenarios-garbage",
        lambda c: (c.tmp / "g.yaml").write_text("a: [") and build(c, "--scenarios", str(c.tmp / "g.yaml")),
        (E, 2, "g.yaml"),
    ),
    (
        "build-shard-index-out-of-range",
        lambda c: build(c, "--shard-index", "5", "--num-shards", "2"),
        (E, 2, "--shard-index 5", "0..1"),
    ),
    (
        "build-shard-index-negative",
        lambda c: build(c, "--shard-index", "-1"),
        (E, 2, "--shard-index", ">= 0"),
    ),
    ("build-num-shards-0", lambda c: build(c, "--num-shards", "0"), (E, 2, "--num-shards", ">= 1")),
    ("build-num-shards-text", lambda c: build(c, "--num-shards", "two"), (E, 2, "--num-shards", "'two'")),
    ("build-num-proc-0", lambda c: build(c, "--num-proc", "0"), (E, 2, "--num-proc", ">= 1")),
    ("build-alpha-5", lambda c: build(c, "--alpha", "5"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-negative", lambda c: build(c, "--alpha", "-0.1"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-nan", lambda c: build(c, "--alpha", "nan"), (E, 2, "--alpha", "0..1")),
    ("build-alpha-text", lambda c: build(c, "--alpha", "high"), (E, 2, "--alpha", "'high'")),
    ("build-duration-0", lambda c: build(c, "--duration", "0"), (E, 2, "--duration", "> 0")),
    ("build-duration-too-long", lambda c: build(c, "--duration", "999"), (E, 2, "--duration", "<= 30")),
    ("build-seed-text", lambda c: build(c, "--seed", "x"), (E, 2, "--seed", "'x'")),
    ("build-seed-negative", lambda c: build(c, "--seed", "-1"), (E, 2, "--seed", ">= 0")),
    ("build-max-skips-negative", lambda c: build(c, "--max-skips", "-1"), (E, 2, "--max-skips", ">= 0")),
    (
        "build-out-is-file",
        lambda c: (c.tmp / "built").write_text("x") and build(c),
        (E, 2, "--out", "is a file"),
    ),
    (
        "compose-alpha-5",
        lambda c: casu(
            "compose",
            str(ROOT / "casu_dataset/scenarios/examples/cafe_order.yaml"),
            "--out",
            str(c.tmp / "o"),
            "--alpha",
            "5",
        ),
        (E, 2, "--alpha", "0..1"),
    ),
    (
        "compose-missing-script",
        lambda c: casu("compose", str(c.tmp / "nope.yaml"), "--out", str(c.tmp / "o")),
        (E, 2, "nope.yaml"),
    ),
    (
        "regenerate-missing-file",
        lambda c: regenerate_case(c, "missing"),
        (E, 2, "annotation.json", "cannot read"),
    ),
    ("regenerate-not-json", lambda c: regenerate_case(c, "not_json"), (E, 2, "annotation.json")),
    (
        "regenerate-not-casu",
        lambda c: regenerate_case(c, "not_casu"),
        (E, 2, "annotation.json", "not a CASU scene annotation"),
    ),
    ("regenerate-json-list", lambda c: regenerate_case(c, "list"), (E, 2, "annotation.json")),
    ("regenerate-folder", lambda c: regenerate_case(c, "dir"), (E, 2, "annotation.json")),
    ("merge-non-casu-folder", lambda c: merge_case(c, "no_report"), (E, 1, "not a CASU build folder")),
    (
        "merge-missing-folder",
        lambda c: casu("merge", "--out", str(c.tmp / "m"), str(c.tmp / "nope")),
        (E, 1, "nope"),
    ),
    ("merge-bad-report-json", lambda c: merge_case(c, "bad_json"), (E, 1, "build_report.json")),
    ("merge-report-without-settings", lambda c: merge_case(c, "no_settings"), (E, 1, "build_report.json")),
    ("merge-report-a-list", lambda c: merge_case(c, "list"), (E, 1, "build_report.json")),
    ("timeline-garbage-audio", lambda c: timeline_cli(c, "garbage_audio"), (E, 2, "s0", "undecodable audio")),
    ("timeline-missing-dataset", lambda c: timeline_cli(c, "missing"), (E, 2, "--dataset")),
    ("timeline-unknown-scene", lambda c: timeline_cli(c, "no_scene"), (E, 2, "--scene 'other'")),
    ("timeline-bad-annotation", lambda c: timeline_cli(c, "bad_annotation"), (E, 2, "s0", "annotation")),
    (
        "review-missing-dataset",
        lambda c: casu("review", "--dataset", str(c.tmp / "nope"), "--port", "0"),
        (E, 2, "--dataset", "not a built CASU folder"),
    ),
    (
        "review-port-out-of-range",
        lambda c: casu("review", "--dataset", str(c.ds), "--port", "70000"),
        (E, 2, "--port", "0..65535"),
    ),
    (
        "retrieval-eval-alphas-text",
        lambda c: casu("retrieval-eval", "--alphas", "0,x"),
        (E, 2, "--alphas", "'x'"),
    ),
    (
        "retrieval-eval-alphas-range",
        lambda c: casu("retrieval-eval", "--alphas", "0,5"),
        (E, 2, "--alphas", "0..1"),
    ),
    (
        "voices-sentences-negative",
        lambda c: casu("voices", "--sentences", "-1"),
        (E, 2, "--sentences", ">= 0"),
    ),
    (
        "push-dataset-missing-folder",
        lambda c: casu("push", "--repo", "me/x", "--folder", str(c.tmp / "nope")),
        (E, 2, "--folder", "nope", "not a dataset folder"),
    ),
    # timeline: a during_turn offset past its turn is an error naming the event, not moved
    (
        "during-turn-offset-50s",
        lambda c: timeline_case(50.0),
        (E, 2, "events[1] (cow)", "offset 50", "turn 1"),
    ),
    ("during-turn-offset-past-end", lambda c: timeline_case(3.5), (E, 2, "events[1] (cow)", "offset 3.5")),
    (
        "during-turn-offset-fits",
        lambda c: (lambda o: Outcome(0 if o.code == 0 else 1, o.out))(timeline_case(1.0)),
        (OK,),
    ),
    # review decisions: the same schema as the data
    ("decision-time-int", lambda c: decision(time=5), (E, 2, "time")),
    ("decision-time-garbage", lambda c: decision(time="yesterday"), (E, 2, "time")),
    ("decision-edit-string", lambda c: decision(action="edit", edit="str"), (E, 2, "edit", "object")),
    ("decision-edit-on-accept", lambda c: decision(edit={"question": "x"}), (E, 2, "edit", "accept")),
    ("decision-answer-list", lambda c: edit(answer=["A"]), (E, 2, "edit.answer")),
    ("decision-answer-AB", lambda c: edit(answer="AB"), (E, 2, "edit.answer", "'AB'")),
    ("decision-answer-empty", lambda c: edit(answer=""), (E, 2, "edit.answer")),
    ("decision-answer-lowercase", lambda c: edit(answer="a"), (E, 2, "edit.answer")),
    (
        "decision-answer-missing",
        lambda c: decision(action="edit", edit={"question": "q", "options": list("abcd")}),
        (E, 2, "edit.answer"),
    ),
    ("decision-options-ints", lambda c: edit(options=[1, 2, 3, 4]), (E, 2, "edit.options")),
    ("decision-options-string", lambda c: edit(options="abcd"), (E, 2, "edit.options")),
    ("decision-question-list", lambda c: edit(question=["q"]), (E, 2, "edit.question")),
    ("decision-edit-extra-field", lambda c: edit(rationale="because"), (E, 2, "edit", "rationale")),
    ("decision-reviewer-list", lambda c: decision(reviewer=["ann"]), (E, 2, "reviewer")),
    ("decision-item-int", lambda c: decision(item=5), (E, 2, "item")),
    ("decision-kind-unknown", lambda c: decision(kind="paragraph"), (E, 2, "kind 'paragraph'")),
    ("decision-action-unknown", lambda c: decision(action="maybe"), (E, 2, "action 'maybe'")),
    ("decision-comment-dict", lambda c: decision(comment={"a": 1}), (E, 2, "comment")),
    ("decision-not-object", lambda c: decision_raw(["A"]), (E, 2, "JSON object")),
    ("decisions-file-bad-time", lambda c: decisions_file(c, {"time": 5}), (SKIP, "line 2", "time")),
    (
        "decisions-file-edit-str",
        lambda c: decisions_file(c, {"action": "edit", "edit": "str"}),
        (SKIP, "line 2"),
    ),
    (
        "decisions-file-answer-list",
        lambda c: decisions_file(
            c, {"action": "edit", "edit": {"question": "q", "options": list("abcd"), "answer": ["A"]}}
        ),
        (SKIP, "line 2", "edit.answer"),
    ),
    (
        "decisions-file-answer-AB",
        lambda c: decisions_file(
            c, {"action": "edit", "edit": {"question": "q", "options": list("abcd"), "answer": "AB"}}
        ),
        (SKIP, "line 2", "edit.answer"),
    ),
    (
        "decisions-file-mixed",
        lambda c: decisions_file(c, {"time": 5}, {"reviewer": 3}, {"item": None}),
        (SKIP, "line 2", "line 3", "line 4"),
    ),
    ("decisions-unknown-items-not-counted", apply_unknown, (SKIP, "ghost")),
]


def _classify(o: Outcome, expect) -> tuple[str, str]:
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


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []


@pytest.mark.parametrize(
    "outcome, expect, verdict",
    [
        (
            Outcome(None, "", "Traceback (most recent call last):\n  ...\nKeyError: 'x'"),
            (E, 2, "--dataset"),
            "TRACEBACK",
        ),
        (Outcome(2, "Traceback (most recent call last):\nValueError"), (E, 2, "--dataset"), "TRACEBACK"),
        (Outcome(0, "evaluated 3 requests"), (E, 2, "--dataset"), "SILENT"),
        (Outcome(0, "HANG: still running after 60 s"), (E, 2, "--dataset"), "SILENT"),
        (Outcome(1, "--dataset: no such folder"), (E, 2, "--dataset"), "UNNAMED"),
        (Outcome(2, "error: no such folder"), (E, 2, "--dataset"), "UNNAMED"),
        (Outcome(2, "--dataset: no such folder"), (E, 2, "--dataset"), "named"),
        (Outcome(2, "--limit: must be > 0"), (SKIP, "line 2"), "SILENT"),
        (Outcome(0, "skipped 1 line(s)"), (SKIP, "line 2"), "UNNAMED"),
        (Outcome(0, "skipped 1 line(s): line 2: time"), (SKIP, "line 2"), "skip"),
        (Outcome(0, ""), (OK,), "ok"),
    ],
)
def test_the_classifier_fails_each_kind_of_bad_handling(outcome, expect, verdict):
    """The corpus is only as strict as `_classify`: a traceback, an error that exits 0, a wrong
    exit code and a message missing the named field each fail a case."""
    assert _classify(outcome, expect)[0] == verdict


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(ctx, tmp_path, case_id, run, expect):
    ctx.tmp = tmp_path
    o = run(ctx)
    verdict, detail = _classify(o, expect)
    assert verdict in ("named", "skip", "ok"), f"{verdict}: {case_id}: {detail}"


def test_exit_codes_are_documented_in_help():
    for cli, argv in ((harness, ["--help"]), (casu, ["--help"])):
        o = cli(*argv)
        assert o.code == 0 and "exit codes" in o.out, o.out[-500:]
    assert "2 " in harness("--help").out and "3 " in harness("--help").out
