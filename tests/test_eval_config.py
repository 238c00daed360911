"""`EvalConfig`: one checked, frozen description of a run that the CLI, keywords and a YAML file all
build, and that `simple_evaluate` takes. Run with the random model on the small real dataset."""

import json

import pytest

from harness import EvalConfig, UsageError, simple_evaluate
from harness.config import read_yaml

VOLATILE = ("date", "start_time", "end_time", "total_evaluation_time_seconds", "timing", "env", "git_hash")


def _stable(doc: dict) -> dict:
    """A results document without what differs between two runs of the same config (times, paths)."""
    out = {k: v for k, v in doc.items() if k not in VOLATILE}
    return json.loads(json.dumps(out, sort_keys=True))


def test_the_same_run_from_keywords_from_a_config_and_from_yaml(casu_small, tmp_path):
    kw = dict(model="random", tasks="role_inference", dataset=str(casu_small), limit=8, seed=3, probe=False)
    by_keywords = simple_evaluate(**kw)
    by_config = simple_evaluate(EvalConfig(**kw))
    path = tmp_path / "run.yaml"
    path.write_text(
        f"model: random\ntasks: role_inference\ndataset: {casu_small}\nlimit: 8\nseed: 3\nno_probe: true\n"
    )
    by_yaml = simple_evaluate(EvalConfig.from_yaml(path))
    assert by_keywords.results["role_inference"]["PEB"]["n"] == 8
    assert _stable(by_keywords.document["results"]) == _stable(by_config.document["results"])
    assert _stable(by_keywords.document["results"]) == _stable(by_yaml.document["results"])
    assert by_keywords["config"] == by_config["config"] == by_yaml["config"]
    # keywords beside a config replace its values, checked again
    other = simple_evaluate(EvalConfig(**kw), seed=4, limit=4)
    assert other["config"]["random_seed"] == 4 and other.results["role_inference"]["PEB"]["n"] == 4


def test_a_config_is_frozen_and_checked_in_one_place():
    c = EvalConfig(model="random", limit="0.5", use_cache="c.sqlite", random_seed=7, predict_only=True)
    assert (c.limit, c.cache, c.seed, c.log_samples) == (0.5, "c.sqlite", 7, True)
    with pytest.raises(Exception, match="frozen"):
        c.seed = 1  # type: ignore[misc]
    assert c.replace(batch_size="auto").batch_size == "auto" and c.batch_size == 1
    assert EvalConfig(**c.keywords()) == c
    for bad, flag in [
        (dict(batch_size=0), "--batch_size"),
        (dict(seed=-2), "--seed"),
        (dict(scoring="vibes"), "--scoring"),
        (dict(judge="gpt"), "--judge"),
        (dict(limit=0), "--limit"),
        (dict(gen_kwargs="beams=4"), "--gen_kwargs beams"),
        (dict(bootstrap_iters=10**9), "bootstrap_iters"),
        (dict(num_fewshot=5), "--num_fewshot"),
        (dict(verbosity="LOUD"), "--verbosity"),
        (dict(log_samples="maybe"), "--log_samples"),
        (dict(numpy_random_seed="x"), "numpy_random_seed"),
        (dict(batchsize=4), "batchsize: not a setting"),
    ]:
        with pytest.raises(UsageError, match=flag):
            EvalConfig(model="random", **bad)


def test_simple_evaluate_without_a_model_names_it():
    with pytest.raises(UsageError, match="model: required"):
        simple_evaluate(tasks="all")
    with pytest.raises(UsageError, match="once"):
        simple_evaluate(EvalConfig(model="random"), config=EvalConfig(model="random"))


def test_a_run_yaml_is_checked_naming_the_file_and_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: random\nlimt: 8\n")
    with pytest.raises(UsageError, match=r"--config .*bad\.yaml: unknown key 'limt'"):
        read_yaml(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("model: random\nmodel: blind\n")
    with pytest.raises(UsageError, match=r"dup\.yaml.*twice"):
        read_yaml(dup)
    listed = tmp_path / "list.yaml"
    listed.write_text("- model\n")
    with pytest.raises(UsageError, match="a mapping of settings"):
        read_yaml(listed)
    with pytest.raises(UsageError, match="no such file"):
        read_yaml(tmp_path / "missing.yaml")
    with pytest.raises(UsageError, match="is a folder"):
        read_yaml(tmp_path)


def test_the_cli_reads_a_config_file_and_its_flags_win(casu_small, tmp_path, capsys):
    from harness.cli import main

    run = tmp_path / "run.yaml"
    run.write_text(
        f"model: random\ntasks: role_inference\ndataset: {casu_small}\nlimit: 8\nno_probe: true\n"
        f"output_path: {tmp_path / 'out'}\nquiet: true\n"
    )
    assert main(["--config", str(run), "--limit", "4"]) == 0
    (doc_path,) = (tmp_path / "out" / "random").glob("casu_results_*.json")
    doc = json.loads(doc_path.read_text())
    assert doc["config"]["limit"] == 4 and doc["results"]["role_inference"]["PEB"]["n"] == 4
    assert doc["audio_probe"]["status"] == "skipped"
    run.write_text("model: random\nbatch_size: -1\n")
    capsys.readouterr()
    assert main(["--config", str(run)]) == 2
    assert "--batch_size" in capsys.readouterr().err
