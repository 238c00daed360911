"""The public Python API (`harness.simple_evaluate`) and adding a task through the contract's
registry plus one YAML, run with the random model on the small real dataset."""

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from casu_dataset import contract

ROLE_YAML = contract.__file__.rsplit("/casu_dataset/", 1)[0] + "/tasks/role_inference.yaml"


def test_simple_evaluate_returns_the_document_the_cli_writes(casu_small, tmp_path):
    from harness import Results, simple_evaluate
    from harness.task.config import load_tasks

    res = simple_evaluate(
        model="random",
        tasks=["role_inference"],
        dataset=str(casu_small),
        limit=4,
        output_path=tmp_path / "out",
        log_samples=True,
        probe=False,
    )
    assert isinstance(res, Results) and res.path is not None and not res.errors
    written = json.loads(res.path.read_text())
    assert {
        k: v
        for k, v in written.items()
        if k not in ("complete", "sample_logs", "lm_eval_sample_logs", "lm_eval_view")
    } == json.loads(json.dumps(res.document))
    # the returned dict is lm-eval's results_<date>.json as written, samples aside
    lm = json.loads((res.path.parent / written["lm_eval_view"]).read_text())
    assert lm == json.loads(json.dumps({k: v for k, v in res.items() if k != "samples"}))
    assert (
        res["results"]["role_inference"]["acc,none"]
        == res.results["role_inference"][contract.FULL_CONDITION]["accuracy"]["value"]
    )
    m = res.results["role_inference"][contract.FULL_CONDITION]
    assert 0 < m["n"] <= 4 and 0 <= m["accuracy"]["value"] <= 1  # --limit keeps whole families
    # lm-eval style: every task's full resolved config is recorded with the results
    cfg = res["config"]["task_configs"]["role_inference"]
    assert cfg == load_tasks()["role_inference"].resolved() and cfg["generation"]["max_new_tokens"] == 32
    # No output path: nothing written, the same numbers (the random model is seeded per request).
    again = simple_evaluate(
        model="random", tasks="role_inference", dataset=str(casu_small), limit=4, probe=False
    )
    assert again.path is None and again.results == res.results
    assert again.table().splitlines()[2].startswith("| random (--limit 4, n=")


def test_simple_evaluate_raises_named_errors_before_loading(casu_small, tmp_path, monkeypatch):
    from harness import UsageError, simple_evaluate
    from harness.run.data import LoadError
    from harness.task.config import TaskConfigError
    from model_adapters import AdapterError

    with pytest.raises(UsageError, match="--conditions 'XYZ'"):
        simple_evaluate(model="random", tasks="role_inference", dataset=str(casu_small), conditions="XYZ")
    with pytest.raises(TaskConfigError, match="--tasks 'nope'"):
        simple_evaluate(model="random", tasks="nope", dataset=str(casu_small))
    with pytest.raises(AdapterError, match="unknown model"):
        simple_evaluate(model="no-such-model", tasks="role_inference", dataset=str(casu_small))
    with pytest.raises(UsageError, match="no such folder"):
        simple_evaluate(model="random", tasks="role_inference", dataset=str(tmp_path / "missing"))
    ds = tmp_path / "ds"
    shutil.copytree(casu_small, ds)
    (ds / "casu_build.json").unlink()  # edited by hand below: no longer the build that wrote it
    t = pq.read_table(ds / "scenes")
    col = pa.array([json.dumps(json.loads(a) | {"version": 99}) for a in t.column("annotation").to_pylist()])
    pq.write_table(
        t.set_column(t.schema.get_field_index("annotation"), "annotation", col),
        next((ds / "scenes").glob("*.parquet")),
    )
    # A masked condition reads the annotation through the contract's reader: a format it does not
    # know is a named error before any inference, not one recorded error per sample.
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures"))  # an adapter that hears the audio
    with pytest.raises(LoadError, match="config 'scenes': row 0 .*annotation: version 99 is not supported"):
        simple_evaluate(
            model="plugin_adapters:AudioHashAdapter",
            tasks="role_inference",
            dataset=str(ds),
            conditions="P__",
            limit=1,
            probe=False,
        )
    assert issubclass(LoadError, ValueError)


@pytest.fixture
def new_task():
    spec = contract.register_task(
        contract.TaskSpec(
            "sound_source",
            "Source",
            "multiple_choice",
            "sound_source",
            "which sound in the scene the speaker reacts to",
        )
    )
    yield spec
    contract.unregister_task(spec.name)


def test_a_task_is_one_registry_entry_plus_one_yaml(casu_small, tmp_path, new_task):
    from harness import simple_evaluate
    from harness.task.config import TaskConfigError

    # The dataset gains the task's config (rows as a builder would write them).
    ds = tmp_path / "ds"
    shutil.copytree(casu_small, ds)
    (ds / "casu_build.json").unlink()  # edited by hand below: no longer the build that wrote it
    rows = pq.read_table(ds / "role_inference").to_pylist()
    for r in rows:
        r["task"] = "sound_source"
    (ds / "sound_source").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), ds / "sound_source" / "test-00000-of-00001.parquet")
    assert "sound_source" in contract.dataset_configs() and "sound_source" in contract.mcq_tasks()
    # ... and one YAML in an include path.
    inc = tmp_path / "tasks"
    inc.mkdir()
    spec = yaml.safe_load(open(ROLE_YAML).read()) | {
        "task": "sound_source",
        "dataset_config": "sound_source",
        "description": "Which sound the speaker reacts to.",
    }
    (inc / "sound_source.yaml").write_text(yaml.safe_dump(spec))
    res = simple_evaluate(
        model="random", tasks="sound_source", dataset=str(ds), include_path=[inc], probe=False
    )
    assert res.results["sound_source"][contract.FULL_CONDITION]["n"] == len(rows) > 0
    assert "Source" in res.table().splitlines()[0]  # the registry's short label is a table column
    # A YAML that disagrees with the registry is refused, naming the file and the registry.
    (inc / "sound_source.yaml").write_text(yaml.safe_dump(spec | {"dataset_config": "role_inference"}))
    with pytest.raises(
        TaskConfigError, match="sound_source.yaml.*registered with dataset_config 'sound_source'"
    ):
        simple_evaluate(model="random", tasks="sound_source", dataset=str(ds), include_path=[inc])
