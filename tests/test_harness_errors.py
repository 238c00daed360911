"""Bad inputs to `python -m harness` (run, validate, table): files and folders, numeric and
lm-eval flags, --model_args typed by the adapter's signature, tasks and task YAMLs, and built
datasets with one thing wrong (schema, shards, card, scenes). Each is refused before any work
with a named error and the documented exit code, or gives the right result; a task YAML that
fails is skipped and named while the other tasks run (exit 2 when nothing is left to run). The
rules are in tests/bad_input_corpus.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bad_input_corpus import (
    OK,
    ROLE,
    ROOT,
    SHARD,
    SKIP,
    TASK_YAML,
    Ctx,
    E,
    Outcome,
    check_case,
    duplicate_ids,
    expect_error,
    harness,
    setcol,
    table_edit,
    truncated,
    write_task,
)
from conftest import tiny_dataset

from casu_dataset.core.env_vars import environment

# -- helpers that make one bad thing each -------------------------------------------------------


def dataset_variant(c: Ctx, name: str, answer="A", drop=None, options=None) -> Path:
    d = tiny_dataset(c.tmp / name, 2, name, answer=answer)
    f = d / "role_inference" / "test-00000-of-00001.parquet"
    t = pq.read_table(f)
    if drop:
        t = t.drop_columns(drop)
    if options is not None:
        t = t.set_column(t.column_names.index("options"), "options", pa.array([options] * len(t)))
    pq.write_table(t, f)
    return d


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


def hub_offline(c: Ctx) -> Outcome:
    with environment({"HF_HUB_OFFLINE": "1"}):
        return c.run(ds="nobody-here/no-such-dataset")


def model_args(c: Ctx, text: str, model="random") -> Outcome:
    return c.run("--model_args", text, model=model)


def run_on(c: Ctx, d: Path, *argv) -> Outcome:
    return c.run(*argv, ds=d)


def ds_case(name, fn, *needles, n=3):
    return (f"dataset-{name}", lambda c: run_on(c, table_edit(c, name, fn, n)), (E, 2, ROLE, *needles))


def second_shard(c: Ctx, name: str, fn) -> Path:
    """A config of two shards, the second one changed by fn."""
    d = tiny_dataset(c.tmp / name, 3, name)
    f = d / SHARD
    t = pq.read_table(f)
    pq.write_table(t.slice(0, 2), d / ROLE / "test-00000-of-00002.parquet")
    pq.write_table(fn(t.slice(2, 1)), d / ROLE / "test-00001-of-00002.parquet")
    f.unlink()
    return d


def card_case(c: Ctx, kind: str) -> Outcome:
    d = tiny_dataset(c.tmp / kind, 2, kind)
    card = d / "README.md"
    if kind == "card-latin1":
        card.write_bytes(card.read_text().replace("# tiny", "# caf\xe9 tiny").encode("latin-1"))
    elif kind == "card-utf16":
        card.write_bytes(card.read_text().encode("utf-16"))
    elif kind == "card-parent-glob":
        (c.tmp / "outside").mkdir(exist_ok=True)
        shutil.copy(d / SHARD, c.tmp / "outside" / "test-x.parquet")
        card.write_text(card.read_text().replace(f"path: {ROLE}/*.parquet", "path: ../outside/*.parquet"))
    elif kind == "card-absolute-glob":
        card.write_text(card.read_text().replace(f"path: {ROLE}/*.parquet", f"path: {d / ROLE}/*.parquet"))
    elif kind == "config-link-outside":
        (c.tmp / "elsewhere").mkdir(exist_ok=True)
        target = c.tmp / "elsewhere" / "test-00000-of-00001.parquet"
        (d / SHARD).rename(target)
        (d / SHARD).symlink_to(target)
    return run_on(c, d)


def task_yaml_case(c: Ctx, **edit) -> Outcome:
    (c.tmp / "outer" / ROLE).mkdir(parents=True, exist_ok=True)
    return c.run("--include_path", str(write_task(c.tmp / "tasks", **edit)), tasks="my_role")


def validate_case(c: Ctx, d: Path) -> Outcome:
    return harness("validate", str(ROOT / "tasks" / f"{ROLE}.yaml"), "--dataset", str(d))


def killed_run_logs(c: Ctx) -> Outcome:
    """A killed run wrote its sample log but not its results JSON; the rerun's folder shows only
    complete runs' logs, and the orphan is kept under incomplete/."""
    out = c.tmp / "res"
    assert c.run("--log_samples").code == 0
    d = next(out.glob("*/"))
    orphan = d / "samples_role_inference_2020-01-01T00-00-00.jsonl"
    orphan.write_text(next(d.glob("samples_*.jsonl")).read_text())
    o = c.run("--log_samples")
    logs = sorted(p.name for p in d.glob("samples_*.jsonl"))
    runs = sorted(d.glob("results_*.json"))
    ok = (
        o.code == 0
        and len(logs) == len(runs) == 2
        and orphan.name not in logs
        and (d / "incomplete" / orphan.name).is_file()
    )
    return Outcome(0 if ok else 1, f"logs {logs}, runs {[r.name for r in runs]}; {o.text[-300:]}")


def scenes_case(c: Ctx, kind: str) -> Outcome:
    """The stems the layer conditions render from, checked before inference (CasuData.check_scenes)."""
    from casu_dataset.core.audio_io import encode_flac
    from harness.run.data import CasuData, LoadError

    d = tiny_dataset(c.tmp / "sc", 2, "sc")
    from casu_dataset.contract import ANNOTATION_FORMAT, SUPPORTED_ANNOTATION_VERSIONS

    flac = {"bytes": encode_flac(np.zeros(1600, np.float32)), "path": "x.flac"}

    def ann(sid):
        return json.dumps(
            {
                "format": ANNOTATION_FORMAT,
                "version": max(SUPPORTED_ANNOTATION_VERSIONS),
                "scene_id": sid,
                "sample_rate": 16000,
                "num_samples": 1600,
                "plan": {"turns": [], "events": []},
                "script": {"events": []},
            }
        )

    rows = [
        {
            "scene_id": f"sc_scene{i}",
            "background": flac,
            "speech": flac,
            "events": flac,
            "annotation": ann(f"sc_scene{i}"),
        }
        for i in range(2)
    ]
    if kind == "null-stem":
        rows[1]["speech"] = None
    elif kind == "missing-scene":
        rows = rows[:1]
    elif kind == "duplicate-scene":
        rows = [rows[0], dict(rows[0])]
    elif kind == "bad-annotation":
        rows[1]["annotation"] = "{}"
    f = d / "scenes" / "test-00000-of-00001.parquet"
    if kind == "stems-as-text":
        pq.write_table(pa.Table.from_pylist([dict(r, speech="s.flac") for r in rows]), f)
    else:
        pq.write_table(pa.Table.from_pylist(rows), f)
    data = CasuData(d)
    return expect_error(lambda: data.check_scenes(data.samples(ROLE)), LoadError)


def options_null_element(t):
    """A table edit: the first row's options hold a null."""
    opts = [["w", None, "y", "z"]] + [["w", "x", "y", "z"]] * (len(t) - 1)
    return t.set_column(t.column_names.index("options"), "options", pa.array(opts, pa.list_(pa.string())))


# -- the corpus: (id, run(ctx) -> Outcome, expectation) ----------------------------------------

CASES = [
    # files and folders
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
    # numeric flags
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
    # the flags lm-eval users type: fractional --limit, --batch_size auto, --gen_kwargs, --verbosity,
    # --hf_hub_log_args, --device
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
        lambda c: c.run("--gen_kwargs", "beams=4"),
        (E, 2, "--gen_kwargs beams", "not a generation setting"),
    ),
    (
        "harness-gen-kwargs-not-kv",
        lambda c: c.run("--gen_kwargs", "greedy"),
        (E, 2, "--gen_kwargs", "expected key=value"),
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
    # --model_args, typed by the adapter's signature, before anything loads
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
    (
        "model-args-rate-limit-wait-nan",
        lambda c: c.run("--model_args", "model=m,rate_limit_wait=nan", model="openai-audio"),
        (E, 2, "rate_limit_wait"),
    ),
    (
        "model-args-rate-limit-wait-negative",
        lambda c: c.run("--model_args", "model=m,rate_limit_wait=-1", model="openai-audio"),
        (E, 2, "rate_limit_wait"),
    ),
    ("model-unknown", lambda c: c.run(model="gpt-17"), (E, 3, "--model 'gpt-17'", "unknown model")),
    (
        "model-plugin-unimportable",
        lambda c: c.run(model="no_such_mod:Cls"),
        (E, 3, "--model 'no_such_mod:Cls'"),
    ),
    ("model-openai-no-model-name", lambda c: model_args(c, "concurrency=2", "openai-audio"), (E, 3, "model")),
    # tasks, --include_path and task YAMLs
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
        (SKIP, "skipped a task file", "role_inference.yaml", "defined twice"),
    ),
    (
        "task-yaml-non-utf8-run",
        lambda c: non_utf8_task(c, True),
        (SKIP, "skipped a task file", "my_role.yaml", "UTF-8"),
    ),
    ("task-yaml-non-utf8-validate", lambda c: non_utf8_task(c, False), (E, 2, "my_role.yaml", "UTF-8")),
    (
        "task-yaml-invalid",
        lambda c: (
            (c.tmp / "i").mkdir()
            or (c.tmp / "i" / "x.yaml").write_text("a: [")
            and c.run("--include_path", str(c.tmp / "i"))
        ),
        (SKIP, "skipped a task file", "x.yaml", "not valid YAML"),
    ),
    (
        "task-yaml-list",
        lambda c: (
            (c.tmp / "i").mkdir()
            or (c.tmp / "i" / "x.yaml").write_text("- 1")
            and c.run("--include_path", str(c.tmp / "i"))
        ),
        (SKIP, "skipped a task file", "x.yaml", "mapping"),
    ),
    (
        "task-yaml-unknown-field",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "u", colour="red"))),
        (SKIP, "skipped a task file", "my_role.yaml", "colour"),
    ),
    (
        "task-yaml-bad-metric",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "m", metrics=["f1"]))),
        (SKIP, "skipped a task file", "my_role.yaml", "metrics", "f1"),
    ),
    (
        "task-yaml-bad-placeholder",
        lambda c: c.run(
            "--include_path", str(write_task(c.tmp / "p", prompt_template="{question} {options} {nope}"))
        ),
        (SKIP, "skipped a task file", "my_role.yaml", "nope"),
    ),
    (
        "task-yaml-version-text",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "v", version="one"))),
        (SKIP, "skipped a task file", "my_role.yaml", "version"),
    ),
    (
        "task-yaml-max-new-tokens-0",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "g", generation={"max_new_tokens": 0}))),
        (SKIP, "skipped a task file", "my_role.yaml", "max_new_tokens"),
    ),
    (
        "task-yaml-temperature-text",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "g", generation={"temperature": "hot"}))),
        (SKIP, "skipped a task file", "my_role.yaml", "temperature"),
    ),
    (
        "task-yaml-unknown-field-only-task",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "u", colour="red")), tasks="my_role"),
        (E, 2, "my_role.yaml", "colour", "no such task"),
    ),
    (
        "task-yaml-bad-metric-only-task",
        lambda c: c.run("--include_path", str(write_task(c.tmp / "m", metrics=["f1"])), tasks="my_role"),
        (E, 2, "my_role.yaml", "metrics", "f1"),
    ),
    (
        "task-yaml-invalid-only-task",
        lambda c: (
            (c.tmp / "i").mkdir()
            or (c.tmp / "i" / "x.yaml").write_text("a: [")
            and c.run("--include_path", str(c.tmp / "i"), tasks="x")
        ),
        (E, 2, "x.yaml", "not valid YAML", "--tasks 'x'"),
    ),
    (
        "task-yaml-name-mismatch",
        lambda c: (
            lambda d: [(d / "my_role.yaml").rename(d / "other.yaml")] and c.run("--include_path", str(d))
        )(write_task(c.tmp / "n")),
        (SKIP, "skipped a task file", "other.yaml", "must match the file name"),
    ),
    (
        "validate-missing-file",
        lambda c: harness("validate", str(c.tmp / "nope.yaml")),
        (E, 2, "nope.yaml", "cannot read"),
    ),
    # other flags and commands
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
    # a built dataset with one thing wrong: its schema is checked before anything runs
    ds_case(
        "options-one-string", setcol("options", lambda t: ["wxyz"] * len(t)), "options", "list of strings"
    ),
    ds_case(
        "options-ints", setcol("options", lambda t: [[1, 2, 3, 4]] * len(t)), "options", "list of strings"
    ),
    ds_case(
        "options-empty-list", setcol("options", lambda t: [[]] * len(t), pa.list_(pa.string())), "0 option"
    ),
    ds_case("options-null-element", options_null_element, "options", "null or empty"),
    ds_case("answer-int", setcol("answer", lambda t: [0] * len(t)), "answer", "int64"),
    ds_case("answer-all-null", setcol("answer", lambda t: [None] * len(t), pa.null()), "answer", "null"),
    ds_case(
        "answer-one-null",
        setcol("answer", lambda t: [None] + ["A"] * (len(t) - 1), pa.string()),
        "row 0",
        "answer",
    ),
    ds_case("answer-lowercase", setcol("answer", lambda t: ["a"] * len(t)), "answer 'a'"),
    ds_case("question-int", setcol("question", lambda t: list(range(len(t)))), "question", "int64"),
    ds_case(
        "question-null",
        setcol("question", lambda t: [None] + ["q?"] * (len(t) - 1), pa.string()),
        "question",
        "empty",
    ),
    ds_case("id-duplicate", setcol("id", lambda t: ["same"] * len(t)), "id 'same' given twice"),
    ds_case(
        "id-null",
        setcol("id", lambda t: [None] + [f"x{i}" for i in range(1, len(t))], pa.string()),
        "row 0: id is None",
    ),
    ds_case(
        "id-empty", setcol("id", lambda t: [""] + [f"x{i}" for i in range(1, len(t))]), "row 0: id is ''"
    ),
    ds_case("id-int", setcol("id", lambda t: list(range(len(t)))), "column 'id'", "int64"),
    ds_case("scene-id-null", setcol("scene_id", lambda t: [None] * len(t), pa.string()), "scene_id"),
    ds_case(
        "audio-one-null",
        lambda t: t.set_column(
            t.column_names.index("audio"),
            "audio",
            pa.array([None] + t.column("audio").to_pylist()[1:], t.schema.field("audio").type),
        ),
        "audio",
    ),
    ds_case("audio-all-null", setcol("audio", lambda t: [None] * len(t), pa.null()), "audio", "null"),
    ds_case("audio-as-string", setcol("audio", lambda t: ["s.flac"] * len(t)), "audio", "string"),
    ds_case(
        "audio-no-bytes",
        lambda t: t.set_column(
            t.column_names.index("audio"), "audio", pa.array([{"bytes": b"", "path": "x"}] * len(t))
        ),
        "audio",
        "no bytes",
    ),
    ds_case("empty-table", lambda t: t.slice(0, 0), "has no rows", "would evaluate nothing"),
    (
        "dataset-eleven-options",
        lambda c: run_on(
            c, table_edit(c, "e11", setcol("options", lambda t: [[f"o{i}" for i in range(11)]] * len(t)))
        ),
        (E, 2, "11 option(s)"),
    ),
    (
        "dataset-shard-extra-column",
        lambda c: run_on(c, second_shard(c, "sx", lambda t: t.append_column("colour", pa.array(["red"])))),
        (E, 2, "another schema", "colour"),
    ),
    (
        "dataset-shard-missing-column",
        lambda c: run_on(c, second_shard(c, "sm", lambda t: t.drop_columns(["audio"]))),
        (E, 2, "another schema", "audio"),
    ),
    (
        "dataset-shard-options-string",
        lambda c: run_on(c, second_shard(c, "so", setcol("options", ["wxyz"]))),
        (E, 2, "another schema", "options"),
    ),
    ("dataset-card-latin1", lambda c: card_case(c, "card-latin1"), (E, 2, "README.md", "not UTF-8")),
    ("dataset-card-utf16", lambda c: card_case(c, "card-utf16"), (E, 2, "README.md", "not UTF-8")),
    ("dataset-card-parent-glob", lambda c: card_case(c, "card-parent-glob"), (E, 2, "../outside", "outside")),
    ("dataset-card-absolute-glob", lambda c: card_case(c, "card-absolute-glob"), (E, 2, "outside")),
    (
        "dataset-config-link-outside",
        lambda c: card_case(c, "config-link-outside"),
        (E, 2, SHARD, "outside the dataset folder"),
    ),
    (
        "dataset-truncated-parquet",
        lambda c: run_on(c, truncated(c, "tr")),
        (E, 2, SHARD, "not a readable parquet"),
    ),
    (
        "dataset-empty-parquet-file",
        lambda c: run_on(c, truncated(c, "z", 0)),
        (E, 2, SHARD, "not a readable"),
    ),
    (
        "validate-options-one-string",
        lambda c: validate_case(c, table_edit(c, "vo", setcol("options", lambda t: ["wxyz"] * len(t)))),
        (E, 2, "options", "list of strings"),
    ),
    (
        "validate-duplicate-ids",
        lambda c: validate_case(c, table_edit(c, "vd", setcol("id", lambda t: ["s"] * len(t)))),
        (E, 2, "given twice"),
    ),
    (
        "validate-empty-table",
        lambda c: validate_case(c, table_edit(c, "ve", lambda t: t.slice(0, 0))),
        (E, 2, "has no rows"),
    ),
    (
        "limit-run-duplicate-ids",
        lambda c: run_on(c, table_edit(c, "ld", setcol("id", lambda t: ["s"] * len(t))), "--limit", "1"),
        (E, 2, "given twice"),
    ),
    # the stems the layer conditions (--conditions all) render from
    ("scenes-null-stem", lambda c: scenes_case(c, "null-stem"), (E, 2, "'scenes'", "sc_scene1", "speech")),
    ("scenes-missing-scene", lambda c: scenes_case(c, "missing-scene"), (E, 2, "'scenes'", "sc_scene1")),
    (
        "scenes-duplicate-scene",
        lambda c: scenes_case(c, "duplicate-scene"),
        (E, 2, "'scenes'", "given twice"),
    ),
    (
        "scenes-bad-annotation",
        lambda c: scenes_case(c, "bad-annotation"),
        (E, 2, "'scenes'", "sc_scene1", "annotation"),
    ),
    (
        "scenes-stems-as-text",
        lambda c: scenes_case(c, "stems-as-text"),
        (E, 2, "'scenes'", "speech", "string"),
    ),
    # task YAMLs: a config path never leaves the dataset folder
    (
        "task-dataset-config-dotdot",
        lambda c: task_yaml_case(c, dataset_config=".."),
        (E, 2, "my_role.yaml", "dataset_config"),
    ),
    ("task-dataset-config-dot", lambda c: task_yaml_case(c, dataset_config="."), (E, 2, "dataset_config")),
    (
        "task-dataset-config-slash",
        lambda c: task_yaml_case(c, dataset_config="../outer/role_inference"),
        (E, 2, "dataset_config"),
    ),
    (
        "task-dataset-config-hidden",
        lambda c: task_yaml_case(c, dataset_config=".git"),
        (E, 2, "dataset_config"),
    ),
    ("task-split-dotdot", lambda c: task_yaml_case(c, split=".."), (E, 2, "my_role.yaml", "split")),
    # outputs
    ("killed-run-sample-log-set-aside", killed_run_logs, (OK,)),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)
