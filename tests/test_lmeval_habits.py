"""Issue 17 (harness side): lm-eval flag habits, results keyed by checkpoint, the lm-eval JSON
view, and the leaderboard path (push / pr-eval-results against a local recording Hub)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import call_main
from fake_hub import FakeHub as Hub
from test_harness_integrity import tiny_dataset

FIX = str(Path(__file__).parent / "fixtures")


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("lm") / "ds", 10, "lm")


def cli(*argv) -> tuple[int, str, str]:
    from harness.cli import main

    return call_main(main, argv)


def run(ds, out, *argv, model="random"):
    return cli(
        "--model",
        model,
        "--tasks",
        "role_inference",
        "--dataset",
        str(ds),
        "--output_path",
        str(out),
        "--quiet",
        "--no_probe",
        *argv,
    )


def test_tasks_list_prints_tasks_without_a_model():
    rc, out, _ = cli("--tasks", "list")
    assert rc == 0 and "role_inference" in out and "scene_description" in out


def test_gen_kwargs_merge_over_the_task_and_are_recorded(ds, tmp_path):
    from harness import simple_evaluate

    res = simple_evaluate(
        "random",
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        gen_kwargs="max_new_tokens=7,do_sample=true,temperature=0.5",
    )
    g = res["generation"]["role_inference"]
    assert (g["max_new_tokens"], g["do_sample"], g["temperature"]) == (7, True, 0.5)
    assert res["config"]["gen_kwargs"] == {"max_new_tokens": "7", "do_sample": "true", "temperature": "0.5"}
    assert res["config"]["task_configs"]["role_inference"]["generation"]["max_new_tokens"] == 7


def test_fractional_limit_takes_that_share_of_each_task_and_warns(ds, tmp_path):
    rc, out, err = run(ds, tmp_path / "r", "--limit", "0.3")
    assert rc == 0, err
    doc = json.loads(next((tmp_path / "r").glob("*/casu_results_*.json")).read_text())
    assert doc["evaluated"]["samples"] == 3 and doc["config"]["limit"] == 0.3  # ceil(0.3 * 10)
    assert "WARNING: --limit 0.3" in err
    row = out.splitlines()[2]
    assert "(--limit 0.3, n=3)" in row and " n=3" in row and "[" in row  # n and the 95% CI in the table


def test_batch_size_auto_gives_the_same_results_as_batch_1(ds, tmp_path, monkeypatch):
    from harness import config as flags
    from harness import simple_evaluate

    monkeypatch.syspath_prepend(FIX)
    assert flags.resolve_batch_size("auto", "cpu") == (flags.AUTO_CPU_BATCH, False)
    assert flags.resolve_batch_size("auto", "cuda:0") == (flags.AUTO_CUDA_START, True)
    # the tiny dataset has no stems: an adapter that takes audio runs the full mixture only (the
    # layer conditions are refused up front when the scenes config cannot render them)
    for model, conds in (("random", "all"), ("plugin_adapters:AudioHashAdapter", "full")):
        one = simple_evaluate(
            model, tasks="role_inference", dataset=str(ds), probe=False, batch_size=1, conditions=conds
        )
        auto = simple_evaluate(
            model, tasks="role_inference", dataset=str(ds), probe=False, batch_size="auto", conditions=conds
        )
        assert auto.results == one.results and auto["config"]["batch_size"] == "auto"
        assert [r.get("response") for r in auto.samples["role_inference"]] == [
            r.get("response") for r in one.samples["role_inference"]
        ]


def test_auto_batch_halves_on_out_of_memory(ds):
    """On CUDA, --batch_size auto starts large and halves until a batch fits; results unchanged."""
    from harness.run.data import CasuData
    from harness.run.runner import RunState, make_units, process
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    class OutOfMemoryError(RuntimeError):
        pass

    class Small(RandomBaseline):
        sizes: list = []

        def loglikelihood(self, reqs):
            self.sizes.append(len(reqs))
            if len(reqs) > 3:
                raise OutOfMemoryError("CUDA out of memory")
            return super().loglikelihood(reqs)

    data = CasuData(str(ds))
    t = load_tasks()["role_inference"]
    from harness.run.conditions import FULL

    a = Small()
    units = make_units(
        t, data.samples(t.dataset_config, t.split), [FULL], a, "loglikelihood", False, False, ["k"]
    )
    state = RunState()
    got = process(units, a, data, None, 16, state, progress=False, shrink_on_oom=True)
    ref = process(units, RandomBaseline(), data, None, 1, RunState(), progress=False)
    assert got == ref and state.batch_size == 2 and max(a.sizes[a.sizes.index(2) :]) == 2


def test_verbosity_sets_the_log_level(ds, tmp_path):
    import logging

    rc, _, err = run(ds, tmp_path / "r", "--verbosity", "debug", "--limit", "2")
    assert rc == 0, err
    assert logging.getLogger("harness").level == logging.DEBUG
    logging.getLogger().setLevel(logging.WARNING)


def test_device_cuda_fails_up_front_without_cuda(ds, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = run(ds, tmp_path / "r", "--device", "cuda")
    assert rc == 2 and "--device cuda: CUDA is not available" in err
    assert not list((tmp_path / "r").glob("*/results_*.json"))
    rc, _, err = run(ds, tmp_path / "r", "--device", "cpu", "--limit", "2")  # the baselines take --device cpu
    assert rc == 0, err


def test_hf_hub_log_args_are_typed_and_recorded(ds):
    from harness import simple_evaluate

    res = simple_evaluate(
        "random",
        tasks="role_inference",
        dataset=str(ds),
        probe=False,
        limit=2,
        hf_hub_log_args="hub_results_org=me,results_repo_name=casu-res,public_repo=false",
    )
    assert res["config"]["hf_hub_log_args"] == {
        "hub_results_org": "me",
        "results_repo_name": "casu-res",
        "public_repo": False,
    }


# -- results keyed by checkpoint ------------------------------------------------------------

from model_adapters.baselines import RandomBaseline  # noqa: E402


class Ckpt(RandomBaseline):
    """The random chooser under a checkpoint name: two checkpoints of one adapter."""

    name = "ckpt"

    def __init__(self, pretrained: str = "none", seed: int = 0):
        super().__init__(seed=seed)
        self.model_args["pretrained"] = pretrained  # part of the fingerprint, as a real checkpoint is


def test_two_checkpoints_get_their_own_folder_and_table_row(ds, tmp_path):
    out = tmp_path / "r"
    for ck, conds in (("Org/Model-A", "all"), ("Org/Model-B", "full"), ("Org/Model-A", "full")):
        rc, _, err = run(
            ds,
            out,
            "--model_args",
            f"pretrained={ck}",
            "--conditions",
            conds,
            model="test_lmeval_habits:Ckpt",
        )
        assert rc == 0, err
    a, b = out / "test_lmeval_habits__Ckpt__Org__Model-A", out / "test_lmeval_habits__Ckpt__Org__Model-B"
    assert a.is_dir() and b.is_dir()
    a_runs = sorted(a.glob("results_*.json"))
    assert len(a_runs) == 2 and len(list(a.glob("results_*.md"))) == 2  # no report overwritten
    # the heatmap belongs to the first (all-conditions) run only; the newer run has none
    stamps = [f.stem[len("results_") :] for f in a_runs]
    assert (a / f"ablation_heatmap_{stamps[0]}.png").is_file() and not (
        a / f"ablation_heatmap_{stamps[1]}.png"
    ).exists()
    assert not (a / "ablation_heatmap.png").exists() and not (a / "results.md").exists()
    rc, table, _ = cli("table", str(out))
    rows = [row for row in table.splitlines() if row.startswith("| test_lmeval_habits")]
    assert rc == 0 and len(rows) == 2 and "(Org/Model-A)" in rows[0] and "(Org/Model-B)" in rows[1]


def test_table_reads_an_old_adapter_keyed_folder(ds, tmp_path):
    """Folders written before checkpoints were keyed (<out>/<adapter>/) still count, one row per
    checkpoint."""
    out = tmp_path / "r"
    for ck in ("X/one", "X/two"):
        rc, _, err = run(ds, out, "--model_args", f"pretrained={ck}", model="test_lmeval_habits:Ckpt")
        assert rc == 0, err
    old = out / "ckpt"
    old.mkdir()
    for f in out.glob("test_lmeval_habits__Ckpt__*/casu_results_*.json"):  # as an older harness named them
        f.rename(old / f"{f.stem[len('casu_') :]}-{f.parent.name[-3:]}.json")
    rc, table, err = cli("table", str(out))
    assert rc == 0, err
    assert sum(row.startswith("| test_lmeval_habits") for row in table.splitlines()) == 2


# -- the lm-eval view of the results ------------------------------------------------------------


def test_lm_eval_view_has_lm_evals_keys_with_the_projects_values(ds, tmp_path):
    from casu_dataset.contract import FULL_CONDITION

    out = tmp_path / "r"
    rc, _, err = run(
        ds,
        out,
        "--conditions",
        "PEB,P__",
        "--limit",
        "6",
        "--gen_kwargs",
        "max_new_tokens=9",
        "--system_instruction",
        "Answer briefly.",
    )
    assert rc == 0, err
    d = out / "random"
    doc = json.loads(next(d.glob("casu_results_*.json")).read_text())
    lm = json.loads((d / doc["lm_eval_view"]).read_text())
    m = doc["results"]["role_inference"][FULL_CONDITION]
    r = lm["results"]["role_inference"]
    assert r["acc,none"] == m["accuracy"]["value"]
    lo, hi = m["accuracy"]["ci95"]
    assert abs(r["acc_stderr,none"] - (hi - lo) / 3.919928) < 1e-12
    assert r["acc,P__"] == doc["results"]["role_inference"]["P__"]["accuracy"]["value"]
    assert lm["versions"] == {"role_inference": doc["config"]["task_versions"]["role_inference"]}
    assert lm["n-shot"] == {"role_inference": 0}
    assert lm["n-samples"]["role_inference"] == {"original": 10, "effective": 6}
    assert lm["config"]["model"] == "random" and lm["config"]["limit"] == 6
    assert lm["config"]["gen_kwargs"] == {"max_new_tokens": "9"}
    assert lm["configs"]["role_inference"]["generation_kwargs"]["max_new_tokens"] == 9
    import hashlib

    assert lm["system_instruction"] == "Answer briefly." == doc["config"]["system_instruction"]
    assert lm["system_instruction_sha"] == hashlib.sha256(b"Answer briefly.").hexdigest()
    assert lm["fewshot_as_multiturn"] is False and "chat_template" in lm


def test_lm_eval_view_family_accuracy():
    """Family data: `family_acc,none` beside `acc,none`, each with its stderr from the project's CI."""
    from harness.output.lmeval import task_results

    m = {
        "n": 8,
        "accuracy": {"value": 0.5, "ci95": [0.3, 0.7]},
        "family_accuracy": {"value": 0.25, "ci95": [0.0, 0.6], "n": 2},
        "unparsed_rate": {"value": 0.0},
    }
    r = task_results("role_inference", {"PEB": m, "_E_": dict(m, accuracy={"value": 0.4, "ci95": None})})
    assert r["acc,none"] == 0.5 and r["family_acc,none"] == 0.25
    assert (
        abs(r["family_acc_stderr,none"] - 0.6 / 3.919928) < 1e-9
        and abs(r["acc_stderr,none"] - 0.4 / 3.919928) < 1e-9
    )
    assert r["acc,_E_"] == 0.4 and r["acc_stderr,_E_"] == "N/A" and "unparsed_rate,none" not in r


# -- the leaderboard path, against a local server that records what the Hub client sends ----------


def private(create_body: dict) -> bool | None:
    """The visibility asked for in a create-repo request (huggingface_hub >= 1 sends `visibility`)."""
    if "visibility" in create_body:
        return create_body["visibility"] == "private"
    return create_body.get("private")


@pytest.fixture
def online(monkeypatch):
    """The client allowed to talk -- to the local recording server only."""
    import huggingface_hub.constants as C

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)


def offline(monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)


@pytest.fixture
def two_runs(ds, tmp_path):
    """A full run and a newer --limit run of one checkpoint."""
    out = tmp_path / "r"
    for extra in ((), ("--limit", "3")):
        rc, _, err = run(ds, out, "--model_args", "pretrained=Org/M", *extra, model="test_lmeval_habits:Ckpt")
        assert rc == 0, err
    return out


def test_push_sends_the_latest_full_run_privately_with_a_card(two_runs, online):
    from huggingface_hub import HfApi

    from harness.output.hub import push

    hub = Hub()
    try:
        api = HfApi(endpoint=hub.url, token="hf_FAKEtoken1234567890")
        out = push(two_runs, "me/casu-results", "casu-org/casu", api=api)
    finally:
        hub.close()
    create = json.loads(next(r for r in hub.requests if r["path"] == "/api/repos/create")["body"])
    assert private(create) is True and create["type"] == "dataset" and create["name"] == "casu-results"
    paths = {line["value"]["path"] for line in hub.commit_lines() if line["key"] == "file"}
    key = "test_lmeval_habits__Ckpt__Org__M"
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
    assert "| test_lmeval_habits:Ckpt (Org/M) |" in text and "--limit" not in text.split("## Table 1")[1]
    entries = __import__("yaml").safe_load(out["eval_results_yaml"])
    assert all(
        0 <= e["value"] <= 100 and "x100 (0-100)" in e["notes"] and "Org/M" in e["notes"] for e in entries
    )


def test_push_public_opt_in_and_limit_only_refused(ds, tmp_path, two_runs, monkeypatch, online):
    import huggingface_hub.constants as C

    hub = Hub()
    monkeypatch.setattr(C, "ENDPOINT", hub.url)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    try:
        rc, out, err = cli("push", "--repo", "me/res", "--output_path", str(two_runs), "--public")
    finally:
        hub.close()
    assert rc == 0, err
    assert (
        private(json.loads(next(r for r in hub.requests if r["path"] == "/api/repos/create")["body"]))
        is False
    )
    only_limit = tmp_path / "lim"
    rc, _, err = run(ds, only_limit, "--limit", "2")
    rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(only_limit), "--dry_run")
    assert rc == 2 and "refusing to push a --limit run" in err and "--limit 2" in err


def test_pr_eval_results_opens_a_pull_request_with_the_yaml(two_runs, online):
    import base64

    import yaml
    from huggingface_hub import HfApi

    from harness.output.hub import pr_eval_results

    hub = Hub()
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


def test_hub_errors_are_one_line_with_exit_5(two_runs, monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    offline(monkeypatch)
    rc, out, err = cli(
        "pr-eval-results",
        "--model_repo",
        "Org/M",
        "--dataset_id",
        "casu-org/casu",
        "--output_path",
        str(two_runs),
    )
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "offline" in err and "Traceback" not in err
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    hub = Hub(status=403)
    monkeypatch.setattr(C, "ENDPOINT", hub.url)
    try:
        rc, out, err = cli(
            "pr-eval-results",
            "--model_repo",
            "Org/M",
            "--dataset_id",
            "casu-org/casu",
            "--output_path",
            str(two_runs),
        )
    finally:
        hub.close()
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "--model_repo Org/M" in err, err
    assert "hf_FAKEtoken" not in err
    rc, out, _ = cli("push", "--help")
    assert rc == 0 and "5  push" in out


# -- --hf_hub_log_args push_results_to_hub=true: the run pushed when it ends -------------------------


@pytest.fixture
def local_hub(monkeypatch, online):
    import huggingface_hub.constants as C

    hub = Hub()
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
    rc, out, err = run(
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


def test_a_push_that_cannot_happen_is_refused_before_anything_loads(ds, tmp_path, monkeypatch):
    from harness import UsageError, simple_evaluate

    missing = tmp_path / "no_dataset"  # the checks come first: the dataset is never opened
    cases = [
        ("push_results_to_hub=true", (), "needs hub_results_org=ORG"),
        ("hub_results_org=me,push_results_to_hub=true", ("--limit", "3"), "a --limit run is never pushed"),
        ("hub_results_org=me,push_results_to_hub=true,push_samples_to_hub=true", (), "needs --log_samples"),
        ("hub_results_org=me,push_samples_to_hub=true", ("--log_samples",), "also set push_results_to_hub"),
        (
            "hub_results_org=me,push_results_to_hub=true,push_samples_to_hub=true,details_repo_name=a..b",
            ("--log_samples",),
            "details_repo_name 'me/a..b'",
        ),
    ]
    for log_args, extra, why in cases:
        rc, out, err = run(missing, tmp_path / "r", "--hf_hub_log_args", log_args, *extra)
        assert rc == 2 and "--hf_hub_log_args" in err and why in err and len(err.strip().splitlines()) == 1, (
            err
        )
    with pytest.raises(UsageError, match="push_results_to_hub=true: needs --output_path"):
        simple_evaluate(
            "random",
            tasks="role_inference",
            dataset=str(ds),
            probe=False,
            hf_hub_log_args="hub_results_org=me,push_results_to_hub=true",
        )
    from casu_dataset.core import hub

    monkeypatch.setattr(
        hub, "can_gate", lambda: False
    )  # a huggingface_hub without update_repo_settings(gated=)
    rc, _, err = run(
        missing, tmp_path / "r", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=true,gated=true"
    )
    assert rc == 2 and "gated=true" in err and "cannot gate" in err
    rc, _, err = run(
        ds, tmp_path / "r2", "--hf_hub_log_args", "hub_results_org=me,gated=true"
    )  # no push: recorded
    assert rc == 0, err


def test_a_hub_failure_after_the_run_keeps_the_results_and_names_the_retry(ds, tmp_path, monkeypatch, online):
    import shlex

    import huggingface_hub.constants as C

    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    bad = Hub(status=403)
    monkeypatch.setattr(C, "ENDPOINT", bad.url)
    try:
        rc, out, err = run(
            ds,
            tmp_path / "r",
            "--log_samples",
            "--hf_hub_log_args",
            "hub_results_org=me,push_results_to_hub=true",
        )
    finally:
        bad.close()
    assert rc == 5 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "me/casu-results" in err and "403" in err and "hf_FAKEtoken" not in err
    saved = next((tmp_path / "r").glob("*/casu_results_*.json"))
    assert str(saved) in err and "| random |" in out  # the run is on disk and its table printed
    retry = shlex.split(err.split("retry: ")[1])
    assert retry[:4] == ["python", "-m", "harness", "push"] and "--no_samples" in retry
    good = Hub()
    monkeypatch.setattr(C, "ENDPOINT", good.url)
    try:
        rc, out, err = cli(*retry[3:])
    finally:
        good.close()
    assert rc == 0, err
    sent = good.committed()["me/casu-results"]
    assert f"random/{saved.name}" in sent and not [p for p in sent if "/samples_" in p]


# -- the progress bar's order ----------------------------------------------------------------------


def test_run_order_keeps_every_group_as_far_along_as_the_run(ds):
    """Slow free-text units are spread over the run, so the ETA (rate so far x units left) is right."""
    from harness.run.conditions import FULL
    from harness.run.data import CasuData
    from harness.run.runner import interleave, make_units, settings_for
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    data = CasuData(str(ds))
    t = load_tasks()["role_inference"]
    slow = t.model_copy(
        update={"generation": t.generation.model_copy(update={"max_new_tokens": 200}), "task": "slow_one"}
    )
    samples = data.samples(t.dataset_config, t.split)
    units = make_units(t, samples, [FULL], RandomBaseline(), "generate", False, False, ["k"]) + make_units(
        slow, samples[:4], [FULL], RandomBaseline(), "generate", False, False, ["k"]
    )

    def group(u):
        return u.mode, tuple(sorted(settings_for(u.task).to_dict().items()))

    for bs in (1, 2, 3):
        order = interleave(units, group, bs)
        assert sorted(u.key for u in order) == sorted(u.key for u in units)
        assert order == interleave(list(reversed(units)), group, bs)  # deterministic
        n_slow = sum(u.task.task == "slow_one" for u in units)
        for i in range(1, len(order) + 1):  # at each point the slow share done tracks the run's share done
            done = sum(u.task.task == "slow_one" for u in order[:i]) / n_slow
            assert abs(done - i / len(order)) <= bs / n_slow + 1e-9, (bs, i)


def test_run_order_keeps_a_familys_scenes_together_in_a_hashed_family_order(ds):
    """A family's variants share work (one transcript per clip, one blind score per question):
    they run together, and families come in a hashed (not by-name) order so the cost per unit
    does not drift over a --limit run, whose first families by name cover more tasks."""
    import dataclasses

    from harness.run.conditions import FULL
    from harness.run.data import CasuData
    from harness.run.runner import interleave, make_units
    from harness.task.config import load_tasks
    from model_adapters.baselines import RandomBaseline

    t = load_tasks()["role_inference"]
    samples = CasuData(str(ds)).samples(t.dataset_config, t.split)
    fams = [f"fam{i // 2:02d}" for i in range(len(samples))]  # five families of two scenes
    samples = [dataclasses.replace(s, family_id=f) for s, f in zip(samples, fams)]
    units = make_units(t, samples, [FULL], RandomBaseline(), "generate", False, False, ["k"])
    order = interleave(units, lambda u: u.mode, 1)
    seq = [u.sample.family_id for u in order]
    runs = [f for i, f in enumerate(seq) if i == 0 or seq[i - 1] != f]
    assert sorted(runs) == sorted(set(seq))  # each family is one contiguous run
    assert runs != sorted(runs)  # and families are not in name order


def test_cpu_threads_default_and_overrides(monkeypatch):
    import os

    from model_adapters.cascade import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cores, want in ((1, 1), (2, 1), (4, 2), (8, 4), (64, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert cpu_threads() == want
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert cpu_threads() == 3 and cpu_threads(2) == 2
    with pytest.raises(ValueError, match="threads must be >= 1"):
        cpu_threads(0)
