"""The harness end to end on a real built dataset: task configs, scoring paths, circular eval,
the audio probe, error isolation, the response cache and resume after a kill, torchrun
sharding, the results schema and outputs, and the Hub push operations."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import tiny_dataset
from helpers import cli_process, harness_cli

from harness.config import EvalConfig
from harness.output.document import document
from harness.run.conditions import parse_conditions
from harness.run.data import CasuData
from harness.run.evaluate import evaluate
from harness.task.config import TaskConfigError, load_task, load_tasks, select_tasks
from model_adapters.base import Adapter

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
ENV = {**os.environ, "PYTHONPATH": f"{FIXTURES}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
TASKS = load_tasks()


def harness(*args, check=True, env=ENV, timeout=600):
    """`python -m harness ARGS` as its own process, with the fixture adapters importable."""
    return cli_process("harness", *args, env=env, timeout=timeout, check=check)


def _results(out: Path, model: str) -> dict:
    files = sorted((out / model).glob("casu_results_*.json"))
    assert files, f"no results in {out / model}"
    return json.loads(files[-1].read_text())


class Fixed(Adapter):
    """Always replies with one string (or scores preferring one option)."""

    name = "fixed"
    supports_loglikelihood = True

    def __init__(self, reply="A", prefer=0, uses_audio=True, fail_on=""):
        super().__init__(reply=reply, prefer=prefer)
        self.reply, self.prefer, self.uses_audio, self.fail_on = reply, prefer, uses_audio, fail_on

    def generate(self, requests, settings):
        if any(r.id == self.fail_on for r in requests):
            raise RuntimeError("boom")
        return [self.reply for _ in requests]

    def loglikelihood(self, requests):
        return [[1.0 if i == self.prefer else 0.0 for i in range(len(r.options))] for r in requests]


# -- task configs -------------------------------------------------------------------------


def test_shipped_tasks_validate():
    assert set(TASKS) == {
        "contextual_reasoning",
        "entity_extraction",
        "role_inference",
        "counterfactual_reasoning",
        "scene_description",
    }
    assert [t.task for t in select_tasks("casu", TASKS)] == sorted(TASKS)
    assert harness("validate").returncode == 0


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"metrics": ["accuracy", "rouge"]}, "metrics: .*unknown metric"),
        ({"prompt_template": "{question}"}, "must contain {options}"),
        ({"answer_format": "free_text"}, "answer_format 'letter' goes with"),
        ({"prompt_template": "{question} {options} {nonsense}"}, "prompt_template: .*nonsense"),
        ({"task": "other_name"}, "must match the file name"),
        ({"generation": {"max_new_tokens": 0}}, "generation.max_new_tokens"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_task_yaml_names_file_and_field(tmp_path, edit, message):
    import yaml

    data = yaml.safe_load((ROOT / "tasks" / "role_inference.yaml").read_text())
    data.update(edit)
    f = tmp_path / "role_inference.yaml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskConfigError, match=message) as err:
        load_task(f)
    assert str(f) in str(err.value)
    p = harness("validate", str(f), check=False)
    assert p.returncode == 2 and str(f) in p.stderr


def test_unknown_task_and_model_fail_before_anything_runs(casu_small, tmp_path):
    rc, _, err = harness_cli("--model", "random", "--tasks", "no_such_task", "--dataset", str(casu_small))
    assert rc == 2 and "no_such_task" in err
    rc, _, err = harness_cli("--model", "gpt-17", "--dataset", str(casu_small))
    assert rc == 3 and "gpt-17" in err and "qwen2-audio" in err
    rc, _, err = harness_cli("--model", "random", "--dataset", str(tmp_path / "missing"))
    assert rc == 2 and "missing" in err


# -- scoring --------------------------------------------------------------------------------


def _eval(adapter, casu_small, tasks=("contextual_reasoning",), **kw):
    opts = EvalConfig(progress=False, **kw)
    return evaluate(adapter, [TASKS[t] for t in tasks], CasuData(casu_small), opts)


def test_generation_parsing_loglikelihood_and_circular(casu_small):
    samples = CasuData(casu_small).samples("entity_extraction")
    share_a = sum(s.answer == "A" for s in samples) / len(samples)
    ev = _eval(Fixed("The answer is A."), casu_small, ("entity_extraction",), circular=True)
    m = ev["results"]["entity_extraction"]["PEB"]
    assert m["accuracy"]["value"] == pytest.approx(share_a) and m["n"] == len(samples)
    assert m["circular_accuracy"]["value"] == 0.0  # rotations move the key away from A
    assert m["unparsed_rate"]["value"] == 0.0 and m["parse_methods"] == {"letter": len(samples)}
    ev = _eval(Fixed("I am not sure."), casu_small, ("entity_extraction",))
    m = ev["results"]["entity_extraction"]["PEB"]
    assert m["accuracy"]["value"] == 0.0 and m["unparsed_rate"]["value"] == 1.0  # never guessed
    ev = _eval(Fixed(prefer=0), casu_small, ("entity_extraction",), scoring="loglikelihood")
    assert ev["results"]["entity_extraction"]["PEB"]["accuracy"]["value"] == pytest.approx(share_a)
    assert ev["scoring"]["entity_extraction"] == "loglikelihood"


def test_family_accuracy_and_family_shapes(casu_small):
    """A constant answer is right on exactly one variant of each family (each option is the key of
    one variant): 25% per variant, no whole family right, on either shape."""
    ev = _eval(Fixed("A"), casu_small, ("role_inference",))
    m = ev["results"]["role_inference"]["PEB"]
    fams = {s.family_id for s in CasuData(casu_small).samples("role_inference")}
    assert len(fams) == 2 and m["accuracy"]["value"] == 0.25 and m["accuracy"]["ci95_resampled"] == "families"
    assert (m["family_accuracy"]["value"], m["family_accuracy"]["families"]) == (0.0, 2)
    assert sorted(m["by_family_shape"]) == ["crossed", "slot"]
    assert all(v["accuracy"]["value"] == 0.25 for v in m["by_family_shape"].values())


def test_paired_accuracy_and_breakdowns(casu_small_v1):
    """Minimal pairs are v1 data."""
    casu_small = casu_small_v1
    ev = _eval(Fixed("A"), casu_small, ("contextual_reasoning",))
    m = ev["results"]["contextual_reasoning"]["PEB"]
    recs = ev["samples"]["contextual_reasoning"]
    pairs = {}
    for r in recs:
        if r.minimal_pair_id:
            pairs.setdefault(r.minimal_pair_id, []).append(r.correct)
    assert pairs and m["paired_accuracy"]["n"] == len(pairs)
    assert m["paired_accuracy"]["value"] == sum(all(v) for v in pairs.values()) / len(pairs)
    assert sum(b["n"] for b in m["breakdowns"]["speech_type"].values()) == m["n"]


def test_audio_probe_warns_when_audio_is_ignored(casu_small):
    ev = _eval(Fixed("A"), casu_small)
    assert ev["audio_probe"]["status"] == "unchanged"
    sys.path.insert(0, str(FIXTURES))
    from plugin_adapters import AudioHashAdapter

    ev = _eval(AudioHashAdapter(), casu_small)
    assert ev["audio_probe"]["status"] == "ok"
    assert _eval(Fixed("A", uses_audio=False), casu_small)["audio_probe"]["status"] == "skipped"


def test_one_failing_sample_is_recorded_and_the_run_goes_on(casu_small):
    sid = CasuData(casu_small).samples("role_inference")[1].id
    ev = _eval(Fixed("B", fail_on=sid), casu_small, ("role_inference",), batch_size=4, probe=False)
    m = ev["results"]["role_inference"]["PEB"]
    assert m["n_errors"] == 1 and m["n"] == len(CasuData(casu_small).samples("role_inference")) - 1
    assert ev["errors"] == [
        {
            "task": "role_inference",
            "condition": "PEB",
            "id": sid,
            "rotation": 0,
            "error": "RuntimeError: boom",
        }
    ]
    doc = document(ev, {"name": "fixed"}, {"conditions": ["PEB"]}, {"path": str(casu_small)})
    assert doc["status"] == "errors" and doc["n_errors"] == 1


def test_the_adapters_audio_limits_are_respected(casu_small):
    seen = []

    class Short(Fixed):
        sample_rate = 8000
        max_audio_seconds = 1.0

        def generate(self, requests, settings):
            seen.extend(len(r.audio) for r in requests)
            return super().generate(requests, settings)

    ev = _eval(Short("A"), casu_small, probe=False, limit=2)
    # --limit keeps whole contrast families (at least one): the 4 variants of one family, each cut
    assert ev["evaluated"]["requests"] == 4 and seen == [8000] * 4 and ev["truncated_audio"] == 4


def test_cli_exit_status_says_when_samples_failed(casu_small, tmp_path):
    sid = CasuData(casu_small).samples("role_inference")[0].id
    p = harness(
        "--model",
        "plugin_adapters:AudioHashAdapter",
        "--model_args",
        f"fail_on={sid}",
        "--tasks",
        "role_inference",
        "--dataset",
        str(casu_small),
        "--output_path",
        str(tmp_path),
        "--quiet",
        "--no_probe",
        check=False,
    )
    assert p.returncode == 4 and sid in p.stderr
    doc = _results(tmp_path, "plugin_adapters__AudioHashAdapter")
    assert doc["status"] == "errors" and doc["errors"][0]["id"] == sid


def test_conditions_and_scene_hint_reach_the_model(casu_small):
    sys.path.insert(0, str(FIXTURES))
    from plugin_adapters import AudioHashAdapter

    ev = _eval(AudioHashAdapter(), casu_small, conditions=parse_conditions("all"), probe=False, limit=3)
    recs = ev["samples"]["contextual_reasoning"]
    assert {r.condition for r in recs} == {c.name for c in parse_conditions("all")}
    ev2 = _eval(AudioHashAdapter(), casu_small, scene_hint=True, probe=False, limit=3)
    r = ev2["samples"]["contextual_reasoning"][0]
    assert r.prompt.startswith("This audio is recorded in ")


# -- CLI: outputs, schema, cache, resume, sharding, push -------------------------------------


def test_cli_run_writes_every_output_in_the_schema(casu_small, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))  # run in this process: BERTScore's model is loaded once
    out = tmp_path / "res"
    rc, stdout, err = harness_cli(
        "--model",
        "plugin_adapters:AudioHashAdapter",
        "--tasks",
        "all",
        "--dataset",
        str(casu_small),
        "--output_path",
        str(out),
        "--log_samples",
        "--conditions",
        "PEB,P__",
        "--quiet",
    )
    assert rc == 0, err
    assert "| Model | BLEU-4 |" in stdout
    model_dir = out / "plugin_adapters__AudioHashAdapter"
    doc = _results(out, "plugin_adapters__AudioHashAdapter")
    # every row of every question config was evaluated, once per condition (counted from the files)
    import pyarrow.parquet as pq

    rows = sum(
        pq.read_metadata(f).num_rows
        for t in TASKS.values()
        for f in (casu_small / t.dataset_config).glob("*.parquet")
    )
    ev = doc["evaluated"]
    assert rows > 0 and ev["samples"] == rows and ev["requests"] == 2 * rows
    assert (
        f"evaluated {2 * rows} requests over {rows} samples from {casu_small} "
        f"(fingerprint {doc['dataset']['fingerprint']})"
    ) in stdout
    for key in (
        "schema_version",
        "date",
        "git_hash",
        "versions",
        "model",
        "config",
        "dataset",
        "generation",
        "scoring",
        "audio_probe",
        "results",
        "n_samples",
        "status",
        "errors",
        "timing",
    ):
        assert key in doc, key
    assert doc["status"] == "ok" and doc["dataset"]["fingerprint"] and doc["versions"]["transformers"]
    assert doc["config"]["conditions"] == ["PEB", "P__"] and doc["audio_probe"]["status"] == "ok"
    acc = doc["results"]["contextual_reasoning"]["PEB"]["accuracy"]
    assert 0 <= acc["ci95"][0] <= acc["value"] <= acc["ci95"][1] <= 1
    sd = doc["results"]["scene_description"]["PEB"]
    assert {"bleu4", "bertscore", "event_match", "one_minus_wer"} <= set(sd)
    assert (
        sd["bertscore"]["model"].endswith("all-MiniLM-L6-v2") or "minilm" in sd["bertscore"]["model"].lower()
    )
    for t in TASKS:
        lines = (
            (model_dir / next(f.name for f in model_dir.glob(f"samples_{t}_*.jsonl")))
            .read_text()
            .splitlines()
        )
        assert len(lines) == 2 * doc["n_samples"][t]
    stamp = sorted(model_dir.glob("casu_results_*.json"))[-1].stem[len("casu_results_") :]
    md = (model_dir / f"results_{stamp}.md").read_text()  # every file of a run carries its stamp
    assert "Table 1" in md and "Table 2" in md
    assert (model_dir / f"accuracy_by_task_{stamp}.png").stat().st_size > 1000
    assert (model_dir / f"ablation_heatmap_{stamp}.png").stat().st_size > 1000
    # a second run is served from the cache and gives the same results
    rc, _, err = harness_cli(
        "--model",
        "plugin_adapters:AudioHashAdapter",
        "--tasks",
        "all",
        "--dataset",
        str(casu_small),
        "--output_path",
        str(out),
        "--conditions",
        "PEB,P__",
        "--quiet",
    )
    assert rc == 0, err
    doc2 = _results(out, "plugin_adapters__AudioHashAdapter")
    assert doc2["timing"]["model_calls"] == 0 and doc2["timing"]["cache_hits"] >= doc2["timing"]["units"]
    assert doc2["results"] == doc["results"]


def test_a_cache_entry_that_is_no_reply_of_its_mode_is_asked_again(tmp_path):
    """A generated answer is cached as {"response": TEXT}: an entry without text (damaged, or not
    written by the harness) is a miss, asked again and overwritten, never scored as unparsed."""
    from harness import simple_evaluate

    ds = tiny_dataset(tmp_path / "ds", 4, "cachekind")
    db = tmp_path / "cache.sqlite"
    kw = dict(tasks="role_inference", dataset=str(ds), probe=False, cache=str(db))
    first = simple_evaluate("random", **kw)
    with sqlite3.connect(db) as c:
        n = c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        c.execute("""UPDATE responses SET value = '{"response": null}'""")
    assert n == first["timing"]["model_calls"] > 0
    again = simple_evaluate("random", **kw)
    assert again["timing"]["cache_hits"] == 0 and again["timing"]["model_calls"] == n
    assert again.results == first.results
    with sqlite3.connect(db) as c:
        values = [json.loads(v) for (v,) in c.execute("SELECT value FROM responses")]
    assert len(values) == n and all(isinstance(v["response"], str) for v in values)


def test_the_plot_shows_family_accuracy_with_its_interval_and_marks_a_partial_run(tmp_path):
    from harness import simple_evaluate
    from harness.output.plots import accuracy_plot_data, plots

    ds = tiny_dataset(tmp_path / "ds", 10, "plot")
    res = simple_evaluate("random", tasks="role_inference", dataset=str(ds), probe=False, limit=4)
    doc = json.loads(json.dumps(res.document))
    m = doc["results"]["role_inference"]["PEB"]
    m["family_accuracy"] = {"value": 0.25, "ci95": [0.0, 0.5], "n": 4, "families": 4, "chance": 1 / 256}
    data = accuracy_plot_data(doc)
    fam = [b for b in data["bars"] if b["metric"] == "family_accuracy"]
    assert fam == [
        {"task": "role_inference", "metric": "family_accuracy", "value": 25.0, "lo": 0.0, "hi": 50.0}
    ]
    assert data["family"] and data["partial"] and data["title"].startswith("PARTIAL (--limit 4, n=4)")
    written = plots(doc, tmp_path, "_x")
    assert [p.name for p in written] == ["accuracy_by_task_x.png"] and written[0].stat().st_size > 1000
    doc["config"]["limit"] = None
    assert not accuracy_plot_data(doc)["partial"] and "PARTIAL" not in accuracy_plot_data(doc)["title"]


def _rows(db: Path) -> int:
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_a_killed_run_resumes_without_repeating_inference(casu_small, tmp_path):
    args = [
        "--model",
        "plugin_adapters:AudioHashAdapter",
        "--model_args",
        "delay=0.15",
        "--tasks",
        "casu",
        "--dataset",
        str(casu_small),
        "--quiet",
        "--no_probe",
    ]
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *args, "--output_path", str(out)],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    db = out / "cache.sqlite"
    t0 = time.time()
    while _rows(db) < 8 and time.time() - t0 < 120 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    done = _rows(db)
    assert done >= 8
    harness(*args, "--output_path", str(out))
    resumed = _results(out, "plugin_adapters__AudioHashAdapter")
    assert resumed["timing"]["cache_hits"] >= done
    assert resumed["timing"]["model_calls"] <= resumed["timing"]["units"] - done
    fresh_out = tmp_path / "fresh"
    harness(*args, "--output_path", str(fresh_out), "--cache", "off")
    assert resumed["results"] == _results(fresh_out, "plugin_adapters__AudioHashAdapter")["results"]


def test_torchrun_two_processes_give_the_same_results(casu_small, tmp_path):
    args = [
        "--model",
        "plugin_adapters:AudioHashAdapter",
        "--tasks",
        "contextual_reasoning,role_inference",
        "--dataset",
        str(casu_small),
        "--quiet",
        "--log_samples",
        "--cache",
        "off",
    ]
    harness(*args, "--output_path", str(tmp_path / "one"))
    torchrun = Path(sys.executable).with_name("torchrun")
    # --standalone: torchrun binds its own free rendezvous port (no bind-then-close race).
    p = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "harness",
            *args,
            "--output_path",
            str(tmp_path / "two"),
        ],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    one, two = (_results(tmp_path / d, "plugin_adapters__AudioHashAdapter") for d in ("one", "two"))
    assert two["config"]["world_size"] == 2 and one["config"]["world_size"] == 1
    assert one["results"] == two["results"] and one["audio_probe"] == two["audio_probe"]
    for t in ("contextual_reasoning", "role_inference"):
        a = sorted((tmp_path / "one" / "plugin_adapters__AudioHashAdapter").glob(f"samples_{t}_*"))[
            0
        ].read_text()
        b = sorted((tmp_path / "two" / "plugin_adapters__AudioHashAdapter").glob(f"samples_{t}_*"))[
            0
        ].read_text()
        assert a == b


def test_push_plans_the_tracker_layout_and_hides_the_token(casu_small, tmp_path):
    from harness.output.hub import plan_push, push

    out = tmp_path / "res"
    harness(
        "--model",
        "random",
        "--tasks",
        "role_inference,scene_description",
        "--dataset",
        str(casu_small),
        "--output_path",
        str(out),
        "--log_samples",
        "--quiet",
    )
    ops = plan_push(out, "casu-org/casu-results")
    stamp = next((out / "random").glob("casu_results_*.json")).stem[len("casu_results_") :]
    assert sorted(o.path_in_repo for o in ops) == sorted(
        [
            f"random/casu_results_{stamp}.json",
            f"random/results_{stamp}.json",
            *(
                f"random/{pre}samples_{t}_{stamp}.jsonl"
                for pre in ("", "casu_")
                for t in ("role_inference", "scene_description")
            ),
            "README.md",
        ]
    )
    res = push(out, "casu-org/casu-results", "casu-org/casu", dry_run=True)
    import yaml

    entries = yaml.safe_load(res["eval_results_yaml"])
    assert {e["dataset"]["task_id"] for e in entries} == {"role_inference", "scene_description"}
    assert all(
        e["dataset"]["id"] == "casu-org/casu" and e["source"]["url"].endswith("casu-org/casu-results")
        for e in entries
    )
    p = harness(
        "push",
        "--repo",
        "casu-org/casu-results",
        "--output_path",
        str(out),
        "--dry_run",
        "--dataset_id",
        "casu-org/casu",
        env={**ENV, "HF_TOKEN": "hf_secret_token_123"},
    )
    assert "hf_secret_token_123" not in p.stdout + p.stderr and ".eval_results/casu.yaml" in p.stdout
    with pytest.raises(ValueError, match="ORG/NAME"):
        plan_push(out, "no-slash")
    t = harness("table", str(out)).stdout
    assert t.splitlines()[2].startswith("| random |")
