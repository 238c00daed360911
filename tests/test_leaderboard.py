"""The leaderboard path: the built dataset's eval.yaml, `harness push` (the latest full run,
privately, with a card), `pr-eval-results` (a pull request to the model repo, bound to that
model's own run) and push_results_to_hub at the end of a run, against a local server that
records what the Hub client sends (tests/fake_hub.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import harness_cli, harness_run, tiny_dataset
from fake_hub import FakeHub


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("lb") / "ds", 10, "lb")


# -- the dataset's eval.yaml ----------------------------------------------------------------------


def test_eval_yaml_lists_the_tasks(casu_small):
    """Exactly the Hub's documented eval.yaml keys (it is validated at push time), no YAML aliases,
    and the value each task reports named in the description."""
    import yaml

    from casu_dataset.contract import mcq_tasks
    from casu_dataset.dataset.card import EVAL_TASK_KEYS, EVAL_YAML_KEYS

    text = (casu_small / "eval.yaml").read_text()
    doc = yaml.safe_load(text)
    assert tuple(doc) == EVAL_YAML_KEYS == ("name", "description", "evaluation_framework", "tasks")
    assert doc["name"] and doc["evaluation_framework"] == "casu-harness"
    assert "&id" not in text and "*id" not in text
    by_id = {t["id"]: t for t in doc["tasks"]}
    assert set(by_id) == {*mcq_tasks(), "scene_description"} and len(mcq_tasks()) == 4
    for tid, t in by_id.items():
        assert tuple(t) == EVAL_TASK_KEYS and t["split"] == "test" and (casu_small / t["config"]).is_dir()
    values = doc["description"].split("(0-100, full audio): ")[1]
    assert (
        f"{', '.join(mcq_tasks())}: accuracy x100" in values
        and "scene_description: BERTScore F1 x100" in values
    )
    assert "(eval.yaml)" in (casu_small / "README.md").read_text()


def test_eval_results_entries_match_the_datasets_eval_yaml(casu_small):
    """Each .eval_results entry `harness push` / `pr-eval-results` writes names a task of the built
    dataset's eval.yaml, with its evaluation_framework and the metric its description names."""
    import yaml

    from harness import simple_evaluate
    from harness.output.hub import eval_results_entries

    doc = yaml.safe_load((casu_small / "eval.yaml").read_text())
    res = simple_evaluate("random", tasks="all", dataset=str(casu_small), probe=False, limit=2)
    entries = eval_results_entries(
        res.document, "org/casu", "https://huggingface.co/datasets/org/casu-results"
    )
    ids = {t["id"] for t in doc["tasks"]}
    assert {e["dataset"]["task_id"] for e in entries} == ids
    # "role_inference, ...: accuracy x100; scene_description: BERTScore F1 x100" -> task -> label
    values = doc["description"].split("(0-100, full audio): ")[1].split(". ")[0]
    label = {
        tid.strip(): lab
        for part in values.split("; ")
        for tids, lab in [part.split(": ")]
        for tid in tids.split(",")
    }
    names = {"accuracy": "accuracy x100", "bertscore_f1": "BERTScore F1 x100"}
    for e in entries:
        assert e["evaluation_framework"] == doc["evaluation_framework"] and 0 <= e["value"] <= 100
        assert label[e["dataset"]["task_id"]] == names[e["notes"].split(" x100")[0]]


# -- harness push and pr-eval-results -------------------------------------------------------------


def private(create_body: dict) -> bool | None:
    """The visibility asked for in a create-repo request (huggingface_hub >= 1 sends `visibility`)."""
    if "visibility" in create_body:
        return create_body["visibility"] == "private"
    return create_body.get("private")


def test_push_sends_the_latest_full_run_privately_with_a_card(two_runs, online):
    from huggingface_hub import HfApi

    from harness.output.hub import push

    hub = FakeHub()
    try:
        api = HfApi(endpoint=hub.url, token="hf_FAKEtoken1234567890")
        out = push(two_runs, "me/casu-results", "casu-org/casu", api=api)
    finally:
        hub.close()
    create = json.loads(next(r for r in hub.requests if r["path"] == "/api/repos/create")["body"])
    assert private(create) is True and create["type"] == "dataset" and create["name"] == "casu-results"
    paths = {line["value"]["path"] for line in hub.commit_lines() if line["key"] == "file"}
    key = "plugin_adapters__Ckpt__Org__M"
    full = [
        f
        for f in (two_runs / key).glob("casu_results_*.json")
        if not json.loads(f.read_text())["config"]["limit"]
    ]
    assert len(full) == 1 and f"{key}/{full[0].name}" in paths and "README.md" in paths
    assert sum(p.startswith(f"{key}/casu_results_") for p in paths) == 1  # the --limit run is not sent
    assert sum(p.startswith(f"{key}/results_") for p in paths) == 1  # its lm-eval results beside it
    card = next(
        line["value"]
        for line in hub.commit_lines()
        if line["key"] == "file" and line["value"]["path"] == "README.md"
    )
    import base64

    text = base64.b64decode(card["content"]).decode()
    assert "| plugin_adapters:Ckpt (Org/M) |" in text and "--limit" not in text.split("## Table 1")[1]
    entries = __import__("yaml").safe_load(out["eval_results_yaml"])
    assert all(
        0 <= e["value"] <= 100 and "x100 (0-100)" in e["notes"] and "Org/M" in e["notes"] for e in entries
    )


def test_push_public_opt_in_and_limit_only_refused(ds, tmp_path, two_runs, monkeypatch, online):
    import huggingface_hub.constants as C

    hub = FakeHub()
    monkeypatch.setattr(C, "ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    try:
        rc, out, err = harness_cli("push", "--repo", "me/res", "--output_path", str(two_runs), "--public")
    finally:
        hub.close()
    assert rc == 0, err
    assert (
        private(json.loads(next(r for r in hub.requests if r["path"] == "/api/repos/create")["body"]))
        is False
    )
    only_limit = tmp_path / "lim"
    rc, _, err = harness_run(ds, only_limit, "--limit", "2")
    rc, _, err = harness_cli("push", "--repo", "me/res", "--output_path", str(only_limit), "--dry_run")
    assert rc == 2 and "refusing to push a --limit run" in err and "--limit 2" in err


def test_pr_eval_results_opens_a_pull_request_with_the_yaml(two_runs, online):
    import base64

    import yaml
    from huggingface_hub import HfApi

    from harness.output.hub import pr_eval_results

    hub = FakeHub()
    try:
        res = pr_eval_results(
            two_runs, "Org/M", "casu-org/casu", api=HfApi(endpoint=hub.url, token="hf_x1234567")
        )
    finally:
        hub.close()
    commit = next(r for r in hub.requests if "/commit/" in r["path"])
    assert commit["path"].startswith("/api/models/Org/M/commit/main") and "create_pr=1" in commit["path"]
    assert not any(r["path"] == "/api/repos/create" for r in hub.requests)  # the model repo is not created
    f = next(line["value"] for line in hub.commit_lines() if line["key"] == "file")
    assert f["path"] == ".eval_results/casu.yaml"
    entries = yaml.safe_load(base64.b64decode(f["content"]))
    assert {e["dataset"]["task_id"] for e in entries} == {"role_inference"} and res["pr_url"].endswith("/7")
    assert entries[0]["dataset"]["id"] == "casu-org/casu" and "seed 0" in entries[0]["notes"]


def test_pr_eval_results_refuses_another_checkpoints_scores(
    ds, tmp_path, online_with_token, monkeypatch, ckpt_model
):
    import base64

    import yaml

    out = tmp_path / "r"
    assert harness_run(ds, out)[0] == 0  # the random baseline: no checkpoint
    rc, _, err = harness_cli(
        "pr-eval-results",
        "--model_repo",
        "Qwen/Qwen2.5-Omni-7B",
        "--dataset_id",
        "me/casu",
        "--output_path",
        str(out),
        "--dry_run",
    )
    assert rc == 2 and "--model_repo Qwen/Qwen2.5-Omni-7B" in err and "--model random" in err, err
    assert "--allow_other_checkpoint" in err and len(err.strip().splitlines()) == 1
    assert harness_run(ds, out, "--model_args", "pretrained=Org/Other", model=ckpt_model)[0] == 0
    assert harness_run(ds, out, "--model_args", "pretrained=Org/M", model=ckpt_model)[0] == 0
    # several checkpoints in the folder: the model repo's own run is chosen
    rc, text, err = harness_cli(
        "pr-eval-results",
        "--model_repo",
        "org/m",
        "--dataset_id",
        "me/casu",
        "--output_path",
        str(out),
        "--dry_run",
    )
    assert rc == 0 and "checkpoint Org/M" in text and "OVERRIDE" not in text, err
    rc, _, err = harness_cli(
        "pr-eval-results",
        "--model_repo",
        "Org/M",
        "--dataset_id",
        "me/casu",
        "--output_path",
        str(out),
        "--checkpoint",
        "Org/Other",
        "--dry_run",
    )
    assert rc == 2 and "checkpoint 'Org/Other'" in err
    hub = FakeHub()
    monkeypatch.setattr(online_with_token, "ENDPOINT", hub.url)
    try:
        rc, text, err = harness_cli(
            "pr-eval-results",
            "--model_repo",
            "Org/M",
            "--dataset_id",
            "me/casu",
            "--output_path",
            str(out),
            "--checkpoint",
            "Org/Other",
            "--allow_other_checkpoint",
        )
    finally:
        hub.close()
    assert rc == 0, err
    f = next(line["value"] for line in hub.commit_lines() if line["key"] == "file")
    entries = yaml.safe_load(base64.b64decode(f["content"]))
    assert all(
        "OVERRIDE: checkpoint Org/Other proposed for Org/M with --allow_other_checkpoint" in e["notes"]
        for e in entries
    )


# -- --hf_hub_log_args push_results_to_hub=true: the run pushed when it ends -------------------------


@pytest.fixture
def local_hub(monkeypatch, online):
    import huggingface_hub.constants as C

    hub = FakeHub()
    monkeypatch.setattr(C, "ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    yield hub
    hub.close()


def test_push_results_to_hub_pushes_the_run_when_it_ends(ds, tmp_path, local_hub):
    from harness import simple_evaluate

    res = simple_evaluate(
        "random",
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        log_samples=True,
        output_path=tmp_path / "r",
        hf_hub_log_args="hub_results_org=me,push_results_to_hub=true,"
        "push_samples_to_hub=true,details_repo_name=casu-details,gated=true",
    )
    assert res.pushed["pushed"] and res.pushed["repo"] == "me/casu-results", res.pushed
    stamp = res.path.stem[len("casu_results_") :]
    got = local_hub.committed()
    assert got["me/casu-results"] == {
        f"random/casu_results_{stamp}.json",
        f"random/results_{stamp}.json",
        "README.md",
    }
    assert got["me/casu-details"] == {
        f"random/samples_role_inference_{stamp}.jsonl",
        f"random/casu_samples_role_inference_{stamp}.jsonl",
        "README.md",
    }
    made = local_hub.created()
    assert set(made) == {"me/casu-results", "me/casu-details"} and all(private(b) for b in made.values())
    gates = [(r["path"], json.loads(r["body"])) for r in local_hub.requests if r.get("method") == "PUT"]
    assert gates == [
        ("/api/datasets/me/casu-results/settings", {"gated": "auto"}),
        ("/api/datasets/me/casu-details/settings", {"gated": "auto"}),
    ]
    assert res.pushed["details_operations"] == [
        f"random/casu_samples_role_inference_{stamp}.jsonl",
        f"random/samples_role_inference_{stamp}.jsonl",
        "README.md",
    ]


def test_the_cli_pushes_results_only_unless_samples_are_asked_for(ds, tmp_path, local_hub):
    rc, out, err = harness_run(
        ds,
        tmp_path / "r",
        "--log_samples",
        "--hf_hub_log_args",
        "hub_results_org=me,results_repo_name=res,push_results_to_hub=true,public_repo=true",
    )
    assert rc == 0, err
    assert "pushed to public datasets/me/res: 3 files" in out
    sent = local_hub.committed()["me/res"]
    assert not [p for p in sent if "/samples_" in p] and any("/results_" in p for p in sent)
    assert private(local_hub.created()["me/res"]) is False
    assert not [r for r in local_hub.requests if r.get("method") == "PUT"]  # not gated
