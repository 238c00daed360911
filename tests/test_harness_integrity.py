"""Harness integrity: the harness evaluates exactly the files on disk, its outputs are
crash-safe, push/table see only complete runs, `validate` catches run-time failures, and a
run reports how many requests it evaluated. Datasets here are tiny synthetic parquet folders
written with the builder's own writer; every CLI run gets a temp HOME/HF_HOME."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import tiny_dataset
from helpers import cli_process

from harness.output.files import atomic_write, clean_stale
from harness.run.data import CasuData, LoadError
from harness.task.config import TaskConfigError, load_task, load_tasks

ROOT = Path(__file__).resolve().parents[1]
TASKS = load_tasks()


@pytest.fixture()
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return {
        **os.environ,
        "HOME": str(home),
        "HF_HOME": str(home / "hf"),
        "HF_HUB_OFFLINE": "1",
        "CASU_CACHE": str(home / "casu"),
        "PYTHONPATH": str(ROOT),
    }


def harness(env, *args, check=True):
    """`python -m harness ARGS` as its own process, in the test's own HOME and caches (`env`)."""
    return cli_process("harness", *args, env=env, timeout=300, check=check)


def run_random(env, dataset: Path, out: Path, *extra):
    p = harness(
        env,
        "--model",
        "random",
        "--tasks",
        "role_inference",
        "--dataset",
        str(dataset),
        "--output_path",
        str(out),
        "--no_probe",
        "--quiet",
        *extra,
    )
    doc = json.loads(Path(p.stdout.split("results: ")[1].split()[0]).read_text())
    return p, doc


# -- 1. exactly the files on disk ----------------------------------------------------------


def test_a_rebuilt_folder_and_a_same_name_folder_are_evaluated_fresh(tmp_path, env):
    # `datasets` caches a local folder by its basename: each of these runs must score the rows on
    # disk (4, then 1 after the rebuild, then 2 in another folder of the same name), not a cached copy.
    out = tmp_path / "res"
    a = tiny_dataset(tmp_path / "a" / "casu_x", 4, "old")
    _, first = run_random(env, a, out)
    for f in a.rglob("*.parquet"):
        f.unlink()
    tiny_dataset(a, 1, "new")  # rebuilt in place, fewer rows
    p2, second = run_random(env, a, out)
    b = tiny_dataset(tmp_path / "b" / "casu_x", 2, "other")  # another folder, same basename
    p3, third = run_random(env, b, out)
    assert [d["n_samples"]["role_inference"] for d in (first, second, third)] == [4, 1, 2]
    assert [d["evaluated"]["requests"] for d in (first, second, third)] == [4, 1, 2]
    fps = [d["dataset"]["fingerprint"] for d in (first, second, third)]
    assert len(set(fps)) == 3
    assert fps[1] == CasuData(a).fingerprint([("role_inference", "test")])
    assert f"evaluated 1 requests over 1 samples from {a} (fingerprint {fps[1]})" in p2.stdout
    assert not (
        Path(env["HF_HOME"]) / "datasets"
    ).exists()  # a local folder never goes through datasets' cache


def test_the_fingerprint_is_of_the_bytes_that_were_read(tmp_path):
    d = tiny_dataset(tmp_path / "ds", 3, "one")
    data = CasuData(d)
    ids = [s.id for s in data.samples("role_inference")]
    fp_read = CasuData(d).fingerprint(["role_inference"])
    tiny_dataset(d, 2, "two")  # the folder changes under a running evaluation
    assert data.fingerprint(["role_inference"]) == fp_read  # still the data it evaluated
    assert [s.id for s in data.samples("role_inference")] == ids
    assert CasuData(d).fingerprint(["role_inference"]) != fp_read


def test_bad_dataset_contents_fail_with_the_file_and_field(tmp_path, env):
    d = tiny_dataset(tmp_path / "ds", 2, "x", answer="E")  # a key outside the four options
    with pytest.raises(LoadError, match=r"role_inference.*row 0.*answer 'E'"):
        CasuData(d).samples("role_inference")
    with pytest.raises(LoadError, match="no split 'dev'"):
        CasuData(d).table("role_inference", "dev")
    (d / "role_inference" / "test-00000-of-00001.parquet").write_bytes(b"PAR1 truncated")
    with pytest.raises(LoadError, match="test-00000-of-00001.parquet: not a readable parquet"):
        CasuData(d).samples("role_inference")
    p = harness(
        env,
        "--model",
        "random",
        "--tasks",
        "role_inference",
        "--dataset",
        str(d),
        "--output_path",
        str(tmp_path / "res"),
        check=False,
    )
    assert p.returncode == 2 and "not a readable parquet" in p.stderr


# -- 2. crash-safe outputs; push and table see complete runs only ---------------------------


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_results_file_with_a_nan_or_without_results_is_skipped_by_name_never_printed(tmp_path, env):
    d = tiny_dataset(tmp_path / "ds", 3, "n")
    out = tmp_path / "res"
    _, good = run_random(env, d, out)
    (f,) = (out / "random").glob("casu_results_*.json")
    cell = good["results"]["role_inference"]
    cond = next(iter(cell))
    for damage, why in (
        (lambda doc: doc["results"]["role_inference"][cond]["accuracy"].update(value=float("nan")), "= nan"),
        (lambda doc: doc.pop("results"), "has no `results`"),
    ):
        doc = json.loads(json.dumps(good))
        damage(doc)
        f.write_text(json.dumps(doc))  # json writes NaN as the bare word NaN, and reads it back
        t = harness(env, "table", str(out), check=False)
        assert t.returncode == 2 and "nan" not in t.stdout.lower() and "Traceback" not in t.stderr
        assert f"skipped {f}:" in t.stderr and why in t.stderr, t.stderr


def test_results_or_a_cache_written_into_the_dataset_are_refused(tmp_path, env):
    d = tiny_dataset(tmp_path / "ds", 2, "o")
    before = sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))
    for extra, want in (
        (["--output_path", str(d)], f"--output_path {d} is --dataset {d}"),
        (["--output_path", str(tmp_path / "res"), "--cache", str(d / "c.sqlite")], "lies inside --dataset"),
    ):
        p = harness(
            env, "--model", "random", "--tasks", "role_inference", "--dataset", str(d), *extra, check=False
        )
        assert p.returncode == 2 and want in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*")) == before  # nothing written into it


def test_killed_run_leftovers_are_ignored_by_push_and_table_and_cleaned(tmp_path, env):
    d = tiny_dataset(tmp_path / "ds", 3, "k")
    out = tmp_path / "res"
    _, good = run_random(env, d, out, "--log_samples")
    model_dir = out / "random"
    good_stamp = next(model_dir.glob("casu_results_*.json")).stem[len("casu_results_") :]
    # what a kill leaves, in the layout without completion records: a newer results JSON (no
    # completion record) with a truncated sample log, and in another model folder a results JSON whose log
    # was cut short after it was written
    stale = dict(good, date="2999-01-01T00:00:00+00:00")
    for k in ("complete", "sample_logs"):
        stale.pop(k)
    (model_dir / "results_2999-01-01T00-00-00.json").write_text(json.dumps(stale))
    (model_dir / "samples_role_inference_2999-01-01T00-00-00.jsonl").write_text('{"id": "k_sce')
    ghost = out / "ghost"
    ghost.mkdir()
    (ghost / "results_2998-01-01T00-00-00.json").write_text(json.dumps(dict(good, model={"name": "ghost"})))
    log = model_dir / good["sample_logs"]["role_inference"]["file"]
    (ghost / log.name).write_text(log.read_text()[:50])
    (ghost / "results_2997-01-01T00-00-00.json").write_text('{"schema_version": 2, "res')  # not renamed: cut
    dead_tmp = model_dir / f".results.md.tmp-{socket.gethostname()}-{_dead_pid()}"
    live_tmp = model_dir / f".results.md.tmp-{socket.gethostname()}-{os.getpid()}"  # a concurrent run's
    dead_tmp.write_text("half")
    live_tmp.write_text("half")

    p = harness(env, "push", "--repo", "org/results", "--output_path", str(out), "--dry_run")
    listing = p.stdout.split("would upload to datasets/org/results:\n")[1].split("\n\n")[0]
    ops = [line.strip() for line in listing.splitlines()]
    # CASU's document and sample records, lm-eval's sample lines and results, the card
    assert ops == [
        f"random/casu_results_{good_stamp}.json",
        f"random/casu_samples_role_inference_{good_stamp}.jsonl",
        f"random/samples_role_inference_{good_stamp}.jsonl",
        f"random/results_{good_stamp}.json",
        "README.md",
    ]
    assert p.stderr.count("skipped") == 3 and "not marked complete" in p.stderr and "truncated" in p.stderr
    t = harness(env, "table", str(out))
    rows = [r for r in t.stdout.splitlines() if r.startswith("| ") and not r.startswith("| Model")]
    assert rows == [rows[0]] and rows[0].startswith("| random |")
    assert "ghost" not in t.stdout

    run_random(env, d, out)  # the next run in this folder removes the dead run's temp file only
    assert not dead_tmp.exists() and live_tmp.exists()
    assert clean_stale(out) == [] and live_tmp.exists()
    live_tmp.unlink()
    assert not list(out.rglob(".*.tmp-*"))  # a finished run leaves no temp file behind


def test_atomic_write_never_leaves_a_partial_file(tmp_path):
    from casu_dataset.core.atomic import atomic_open

    f = tmp_path / "results.json"
    atomic_write(f, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(f) as fh:
            fh.write('{"partial": ')
            raise RuntimeError("killed mid-write")
    assert f.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["results.json"]


# -- 3. validate catches what would fail at run time ----------------------------------------


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"generation": {"do_sample": True}}, "generation: .*do_sample: true needs temperature > 0"),
        ({"generation": {"temperature": 0.7}}, "generation: .*no effect without do_sample"),
        ({"generation": {"do_sample": True, "temperature": float("nan")}}, "generation.temperature"),
        ({"prompt_template": "{question} {options} {}"}, "prompt_template: .*unknown placeholder"),
        ({"prompt_template": "{question:d} {options}"}, "prompt_template: .*does not render"),
        ({"prompt_template": "{question!z} {options}"}, "prompt_template: .*does not render"),
        ({"prompt_template": "{question} {options} {"}, "prompt_template"),
        ({"dataset_config": "scenes"}, "holds scenes and stems"),
        ({"dataset_config": "scene_description"}, "has no options"),
        ({"split": "test/../x"}, "split"),
    ],
)
def test_validate_rejects_settings_that_fail_at_run_time(tmp_path, edit, message):
    import yaml

    from harness.run.runner import settings_for
    from harness.task.prompts import build_prompt

    data = yaml.safe_load((ROOT / "tasks" / "role_inference.yaml").read_text())
    data.update(edit)
    f = tmp_path / "role_inference.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskConfigError, match=message):
        load_task(f)
    for cfg in TASKS.values():  # what validate accepts, the run accepts
        settings_for(cfg)
        build_prompt(cfg.prompt_template, "q", ["a", "b"], "kitchen")


def test_validate_checks_tasks_against_a_dataset(tmp_path, env):
    import yaml

    d = tiny_dataset(tmp_path / "ds", 2, "v")
    p = harness(env, "validate", "--dataset", str(d), str(ROOT / "tasks" / "role_inference.yaml"))
    assert "ok  role_inference" in p.stdout
    sampling = yaml.safe_load((ROOT / "tasks" / "role_inference.yaml").read_text()) | {
        "generation": {"do_sample": True}
    }
    (tmp_path / "role_inference.yaml").write_text(
        yaml.safe_dump(sampling)
    )  # passed validate, then failed the run
    p = harness(env, "validate", str(tmp_path / "role_inference.yaml"), check=False)
    assert p.returncode == 2 and "do_sample: true needs temperature > 0" in p.stderr
    bad_split = yaml.safe_load((ROOT / "tasks" / "role_inference.yaml").read_text()) | {"split": "dev"}
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "role_inference.yaml").write_text(yaml.safe_dump(bad_split))
    p = harness(env, "validate", "--dataset", str(d), str(tmp_path / "t"), check=False)
    assert p.returncode == 2 and "no split 'dev'" in p.stderr
    sd = d / "scene_description" / "test-00000-of-00001.parquet"
    pq.write_table(pq.read_table(sd).drop_columns(["reference"]), sd)
    p = harness(env, "validate", "--dataset", str(d), check=False)
    assert p.returncode == 2 and "no column(s) ['reference']" in p.stderr and "ok  role_inference" in p.stdout


def test_a_dropped_casudata_frees_its_tables_and_audio(tmp_path):
    """Tables and rows are held by their CasuData alone (they were lru_cache'd on the class, so
    every dataset a process evaluated stayed in memory until exit)."""
    import gc
    import weakref

    from harness.run.conditions import FULL

    d = tiny_dataset(tmp_path / "ds", 3, "w")
    data = CasuData(d)
    data.check_all([TASKS["role_inference"]])
    rows = data.samples("role_inference")
    assert data.samples("role_inference") is rows and len(rows) == 3  # read once per CasuData
    assert data.audio(rows[0], FULL).dtype == np.float32
    gone = weakref.ref(data), weakref.ref(data.table("role_inference"))
    del data, rows
    gc.collect()
    assert gone[0]() is None and gone[1]() is None
