"""Issue 25: Hugging Face and lm-eval habits, round 2. Hub failures of the installed client as
one line and exit 5 (a local server that drops connections, refuses them or never answers),
strict model arguments, pr-eval-results bound to its model repo, lm-eval-shaped outputs and a
notebook-first simple_evaluate. Nothing here touches the network."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from conftest import call_main
from fake_hub import FakeHub
from test_harness_integrity import tiny_dataset
from test_lmeval_habits import run  # noqa: E402  (one CLI run helper for both files)

from model_adapters.baselines import RandomBaseline


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("hf2") / "ds", 10, "hf2")


def cli(*argv, main=None) -> tuple[int, str, str]:
    if main is None:
        from harness.cli import main
    return call_main(main, argv)


class Ckpt(RandomBaseline):
    """The random chooser under a checkpoint name."""

    name = "ckpt"

    def __init__(self, pretrained: str = "none", seed: int = 0):
        super().__init__(seed=seed)
        self.model_args["pretrained"] = pretrained


# -- 1. Hub failures of the installed client ------------------------------------------------------


class BadHub:
    """A local endpoint that drops every connection, refuses them (nothing listens) or accepts and
    never answers ("hang")."""

    def __init__(self, mode: str):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list = []
        if mode == "refuse":
            self.sock.close()
            return
        threading.Thread(target=self._serve, args=(mode,), daemon=True).start()

    def _serve(self, mode):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if mode == "drop":
                c.close()
            else:
                self.held.append(c)

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def online(monkeypatch):
    import huggingface_hub.constants as C

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_TOKEN", "hf_FAKEtoken1234567890")
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "1")
    return C


@pytest.fixture
def full_run(ds, tmp_path):
    out = tmp_path / "r"
    rc, _, err = run(
        ds, out, "--model_args", "pretrained=Org/M", "--log_samples", model="test_hf_habits2:Ckpt"
    )
    assert rc == 0, err
    return out


@pytest.mark.parametrize("mode", ["drop", "refuse", "hang"])
def test_every_hub_command_is_one_line_and_exit_5_when_the_network_fails(
    mode, full_run, ds, tmp_path, online, monkeypatch
):
    from casu_dataset.cli import main as dataset_main

    bad = BadHub(mode)
    monkeypatch.setattr(online, "ENDPOINT", bad.url)
    folder = tmp_path / "dsfolder"
    folder.mkdir()
    (folder / "README.md").write_text("---\npretty_name: t\n---\n# t\n")
    try:
        got = {
            "push": cli("push", "--repo", "me/res", "--output_path", str(full_run)),
            "pr-eval-results": cli(
                "pr-eval-results",
                "--model_repo",
                "Org/M",
                "--dataset_id",
                "me/casu",
                "--output_path",
                str(full_run),
            ),
            "casu_dataset push": cli("push", "--repo", "me/tiny", "--folder", str(folder), main=dataset_main),
            "run": run(
                ds, tmp_path / "auto", "--hf_hub_log_args", "hub_results_org=me,push_results_to_hub=true"
            ),
        }
    finally:
        bad.close()
    for what, (rc, out, err) in got.items():
        lines = err.strip().splitlines()
        assert rc == 5, (what, rc, err)
        assert len(lines) == 1 and "Traceback" not in err and "hf_FAKEtoken" not in err, (what, err)
        assert "upload failed" in err, (what, err)
        if mode == "hang":
            assert "no answer within 1 s" in err and "CASU_HUB_TIMEOUT" in err, (what, err)
    rc, out, err = got["run"]
    assert "| random |" in out and "retry: python -m harness push" in err  # the table, then the retry line


def test_a_real_process_prints_one_line_quickly_when_the_hub_drops_connections(full_run, tmp_path):
    """In a process of its own (huggingface_hub's retry warnings would reach its stderr), the
    pull request fails fast: the repo is looked up first, and the upload's retries are quiet."""
    import os
    import subprocess
    import sys
    import time

    bad = BadHub("drop")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=bad.url, HF_TOKEN="hf_FAKEtoken1234567890", HF_HOME=str(tmp_path / "hf"))
    t0 = time.time()
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "pr-eval-results",
                "--model_repo",
                "Org/M",
                "--dataset_id",
                "me/casu",
                "--output_path",
                str(full_run),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=Path(__file__).parent.parent,
        )
    finally:
        bad.close()
    assert p.returncode == 5 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Retrying" not in p.stderr and time.time() - t0 < 20


def test_upload_retries_are_quiet_unless_info_was_asked_for():
    import logging

    from casu_dataset.core import hub

    log = logging.getLogger("huggingface_hub.utils._http")
    before = log.level
    with hub._quiet_retries():
        assert not log.isEnabledFor(logging.WARNING)
    assert log.level == before
    logging.getLogger("huggingface_hub").setLevel(logging.INFO)
    try:
        with hub._quiet_retries():
            assert log.isEnabledFor(logging.WARNING)  # --verbosity INFO: the retries are shown
    finally:
        logging.getLogger("huggingface_hub").setLevel(logging.NOTSET)


def test_an_unauthorized_token_is_one_line_and_exit_5(full_run, online, monkeypatch):
    hub = FakeHub(status=401)
    monkeypatch.setattr(online, "ENDPOINT", hub.url)
    try:
        rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(full_run))
    finally:
        hub.close()
    assert rc == 5 and "401" in err and len(err.strip().splitlines()) == 1 and "hf_FAKEtoken" not in err, err


def test_a_bad_hub_timeout_is_a_usage_error(full_run, online, monkeypatch):
    monkeypatch.setenv("CASU_HUB_TIMEOUT", "soon")
    rc, _, err = cli("push", "--repo", "me/res", "--output_path", str(full_run))
    assert rc == 2 and "CASU_HUB_TIMEOUT='soon'" in err


def test_a_bug_is_not_reported_as_a_network_failure():
    from casu_dataset.core import hub

    assert not hub.is_network_error(KeyError("x")) and not hub.is_network_error(TypeError("y"))
    import httpx2

    assert hub.is_network_error(httpx2.ConnectError("refused")) and hub.is_network_error(
        httpx2.ReadTimeout("")
    )


# -- 3. pr-eval-results proposes only the run of its model repo ---------------------------------------


def test_pr_eval_results_refuses_another_checkpoints_scores(ds, tmp_path, online, monkeypatch):
    import base64

    import yaml

    out = tmp_path / "r"
    assert run(ds, out)[0] == 0  # the random baseline: no checkpoint
    rc, _, err = cli(
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
    assert run(ds, out, "--model_args", "pretrained=Org/Other", model="test_hf_habits2:Ckpt")[0] == 0
    assert run(ds, out, "--model_args", "pretrained=Org/M", model="test_hf_habits2:Ckpt")[0] == 0
    # several checkpoints in the folder: the model repo's own run is chosen
    rc, text, err = cli(
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
    rc, _, err = cli(
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
    monkeypatch.setattr(online, "ENDPOINT", hub.url)
    try:
        rc, text, err = cli(
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


# -- 2. model arguments reach the loader, or are refused by name --------------------------------------


def test_unknown_and_unsupported_model_args_are_refused_by_name(ds, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "bitsandbytes" else real(n, *a)
    )
    cases = [
        ("revision=abc123,typo_dtpye=bfloat16", "typo_dtpye"),
        ("load_in_4bit=true", "needs bitsandbytes"),
        ("load_in_4bit=yes", "load_in_4bit='yes'"),
        ("peft=my/adapter", "peft=my/adapter: qwen2-audio does not support it"),
        ("torch_dtype=bfloat16", "use dtype="),
        ("attn_implementation=flash", "attn_implementation='flash'"),
        ("bnb_4bit_quant_type=nf4", "only with load_in_4bit=true"),
        (f"pretrained={tmp_path},revision=abc123", "is a local folder, which has no revisions"),
    ]
    for args, why in cases:
        rc, _, err = run(ds, tmp_path / "r", "--model_args", args, model="qwen2-audio")
        assert rc == 2 and why in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "r" / "qwen2-audio").exists()  # nothing was run or recorded


def _hub_cache_copy(src: Path, cache: Path, repo: str, sha: str, ref: str) -> None:
    """A Hub cache entry for `repo` at commit `sha` (branch `ref`), as `hf download` leaves it."""
    import shutil

    base = cache / ("models--" + repo.replace("/", "--"))
    shutil.copytree(src, base / "snapshots" / sha)
    (base / "refs").mkdir(parents=True)
    (base / "refs" / ref).write_text(sha)


def test_revision_reaches_from_pretrained_and_is_recorded_as_the_model_sha(ds, tmp_path, monkeypatch):
    import huggingface_hub.constants as C
    import tiny_models as tiny

    from harness import simple_evaluate
    from model_adapters.base import AdapterError
    from model_adapters.registry import make_adapter

    src = tiny.build_qwen2_audio(tmp_path / "tiny")
    sha = "0123456789abcdef0123456789abcdef01234567"
    _hub_cache_copy(src, tmp_path / "hub", "casu-test/tiny-qwen2-audio", sha, "v1")
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = {"pretrained": "casu-test/tiny-qwen2-audio", "device": "cpu", "dtype": "float32"}
    with pytest.raises(
        AdapterError, match="cannot load"
    ):  # no `main` in the cache: the revision is what loads
        make_adapter("qwen2-audio", args)._load()
    res = simple_evaluate(
        "qwen2-audio",
        dict(args, revision="v1"),
        tasks="role_inference",
        dataset=str(ds),
        limit=2,
        probe=False,
    )
    cfg = res["config"]
    assert cfg["model_revision"] == "v1" and cfg["model_sha"] == sha and cfg["model_num_parameters"] > 0
    assert cfg["model_dtype"] == "torch.float32" and "revision=v1" in cfg["model_args"]
    assert res.document["model"]["meta"]["model_sha"] == sha
    # the keys of a real lm-eval results file (an HF model's), all present, with lm-eval's types
    real = json.loads((Path(__file__).parent / "fixtures" / "lm_eval_real_results_keys.json").read_text())
    ours = json.loads(json.dumps(res))
    assert set(real["top_level_keys"]) <= set(ours), set(real["top_level_keys"]) - set(ours)
    assert set(ours) - set(real["top_level_keys"]) == {"groups", "casu"}  # groups: lm-eval's schema too
    assert set(real["config_keys"]) <= set(ours["config"])
    kinds = {"float": float, "str": str, "dict": dict, "int": int}
    for key, kind in real["types"].items():
        v = ours["config"][key.split(".", 1)[1]] if key.startswith("config.") else ours[key]
        assert isinstance(v, kinds[kind]) and not isinstance(v, bool), (key, v)
    assert (
        0 < ours["max_length"] < 10**9
        and ours["tokenizer_eos_token"][0]
        and ours["chat_template"]
        and len(ours["chat_template_sha"]) == 64
    )


# -- 4. lm-eval's own output schema ---------------------------------------------------------------


# lm_eval/utils.py's readers, copied: what lm-eval's tools (the Hub tracker card, zeno) glob for
def get_results_filenames(filenames):
    return [f for f in filenames if "/results_" in f and ".json" in f]


def get_sample_results_filenames(filenames):
    return [f for f in filenames if "/samples_" in f and ".json" in f]


def get_file_datetime(filename):
    return filename[filename.rfind("_") + 1 :].replace(".jsonl", "")


def get_latest_filename(filenames):
    return max(filenames, key=lambda f: get_file_datetime(f))


def test_the_written_files_are_lm_evals_schema_and_casus_own_is_beside_them(ds, tmp_path):
    import hashlib

    import lm_eval_schema as S
    from pydantic import TypeAdapter

    out = tmp_path / "r"
    rc, _, err = run(
        ds,
        out,
        "--conditions",
        "PEB,P__",
        "--log_samples",
        "--model_args",
        "pretrained=Org/M",
        "--system_instruction",
        "Answer briefly.",
        model="test_hf_habits2:Ckpt",
    )
    assert rc == 0, err
    folder = out / "test_hf_habits2__Ckpt__Org__M"
    names = sorted(f"{folder.name}/{p.name}" for p in folder.iterdir())
    res_files, sample_files = get_results_filenames(names), get_sample_results_filenames(names)
    assert len(res_files) == 1 and res_files[0].endswith(".json") and len(sample_files) == 1
    assert not [n for n in res_files + sample_files if "casu_" in n]  # CASU's own files are not globbed
    latest = json.loads((out / get_latest_filename(res_files)).read_text())
    TypeAdapter(S.EvalResults).validate_python(latest, strict=True)
    lines = [json.loads(x) for x in (out / sample_files[0]).read_text().splitlines()]
    for line in lines:
        TypeAdapter(S.SampleResult).validate_python(line, strict=True)
    # lm-eval's values, not CASU's: a float date, the checkpoint as model_name, the tracker fields
    assert isinstance(latest["date"], float) and latest["model_name"] == "Org/M"
    assert latest["model_name_sanitized"] == "Org__M" and latest["model_source"] == "test_hf_habits2:Ckpt"
    assert float(latest["total_evaluation_time_seconds"]) == latest["end_time"] - latest["start_time"] >= 0
    assert latest["system_instruction_sha"] == hashlib.sha256(b"Answer briefly.").hexdigest()
    assert latest["higher_is_better"] == {"role_inference": {"acc": True}}  # only the metrics the task has
    r = latest["results"]["role_inference"]
    assert r["name"] == r["alias"] == "role_inference" and r["sample_len"] == 10 and "acc,P__" in r
    # task_hashes as EvaluationTracker computes them, from the sample lines
    joined = "".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines)
    assert latest["task_hashes"] == {"role_inference": hashlib.sha256(joined.encode()).hexdigest()}
    assert {s["filter"] for s in lines} == {"none", "P__"} and len(lines) == 20
    one = next(s for s in lines if s["filter"] == "none" and s["doc_id"] == 0)
    assert one["doc"]["question"] and one["target"] == one["doc"]["answer"] and one["metrics"] == ["acc"]
    assert one["prompt_hash"] == hashlib.sha256(one["arguments"]["gen_args_0"]["arg_0"].encode()).hexdigest()
    # the lm-eval accuracy is the share of lines right, and CASU's value
    casu = json.loads(next(folder.glob("casu_results_*.json")).read_text())
    acc = [s["acc"] for s in lines if s["filter"] == "none"]
    assert (
        r["acc,none"] == sum(acc) / len(acc) == casu["results"]["role_inference"]["PEB"]["accuracy"]["value"]
    )
    assert latest["casu"]["document"] == next(folder.glob("casu_results_*.json")).name


def test_scene_description_lines_carry_their_metrics(casu_small, tmp_path):
    import lm_eval_schema as S
    from pydantic import TypeAdapter

    from harness import simple_evaluate

    # both fixture families: the slot of one is its background, so only the other has sound events
    # (Event Match is undefined without any)
    res = simple_evaluate(
        "random", tasks="scene_description", dataset=str(casu_small), limit=8, probe=False, log_samples=True
    )
    TypeAdapter(S.EvalResults).validate_python(json.loads(json.dumps(res)), strict=True)
    line = res["samples"]["scene_description"][0]
    assert line["target"] and set(line["metrics"]) <= {"bertscore", "event_match", "one_minus_wer"}
    assert "bertscore" in line["metrics"] and isinstance(line["bertscore"], float)
    assert set(res["higher_is_better"]["scene_description"]) == {
        "bleu",
        "bertscore",
        "event_match",
        "one_minus_wer",
    }


# -- 5. simple_evaluate as lm-eval's, with a model loaded once ------------------------------------


def test_simple_evaluate_takes_a_loaded_adapter_and_lm_evals_keywords(ds, tmp_path, capsys):
    from harness import UsageError, simple_evaluate
    from model_adapters.registry import make_adapter

    adapter = make_adapter("random", {"seed": 3})

    class Tracker:  # lm-eval's EvaluationTracker, as simple_evaluate uses it
        output_path = str(tmp_path / "tracked")

        class general_config_tracker:
            got = {}

            @classmethod
            def log_experiment_args(cls, **kw):
                cls.got = kw

    res = simple_evaluate(
        model=adapter,
        tasks=["role_inference"],
        dataset=str(ds),
        probe=False,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=1234,
        bootstrap_iters=0,
        use_cache=str(tmp_path / "c.sqlite"),
        write_out=True,
        evaluation_tracker=Tracker,
        verbosity="INFO",
        log_samples=True,
    )
    assert isinstance(res, dict) and 0 <= res["results"]["role_inference"]["acc,none"] <= 1
    assert res["results"]["role_inference"]["acc_stderr,none"] == "N/A"  # bootstrap_iters=0, as lm-eval
    assert res["config"]["bootstrap_iters"] == 0 and res["config"]["fewshot_seed"] == 1234
    assert res["config"]["use_cache"] == str(tmp_path / "c.sqlite") and (tmp_path / "c.sqlite").is_file()
    assert len(res["samples"]["role_inference"]) == 10 and res.path.parent.parent == tmp_path / "tracked"
    assert Tracker.general_config_tracker.got["model_source"] == "random"
    assert "--- role_inference: first prompt" in capsys.readouterr().out  # write_out
    again = simple_evaluate(
        model=adapter, tasks="role_inference", dataset=str(ds), probe=False, cache=str(tmp_path / "c.sqlite")
    )
    assert again["results"]["role_inference"]["acc,none"] == res["results"]["role_inference"]["acc,none"]
    assert again["timing"]["cache_hits"] == 10  # the same adapter, the same cache keys
    pred = simple_evaluate(
        model=adapter, tasks="role_inference", dataset=str(ds), probe=False, predict_only=True
    )
    assert (
        pred["results"]["role_inference"]["bypass,none"] == 999
        and "acc,none" not in pred["results"]["role_inference"]
    )
    assert len(pred["samples"]["role_inference"]) == 10 and pred["samples"]["role_inference"][0]["resps"]
    for kw, why in (
        ({"model_args": "seed=1"}, "already built"),
        ({"random_seed": 1, "seed": 2}, "give one"),
        ({"numpy_random_seed": 1234}, "numpy_random_seed=1234"),
        ({"bootstrap_iters": -1}, "bootstrap_iters=-1"),
        ({"bootstrap_iters": 10**9}, r"bootstrap_iters=1000000000: an integer in 0\.\.1,000,000"),
        ({"verbosity": "LOUD"}, "--verbosity 'LOUD'"),
    ):
        with pytest.raises(UsageError, match=why):
            simple_evaluate(model=adapter, tasks="role_inference", dataset=str(ds), probe=False, **kw)
    with pytest.raises(UsageError, match="model=int"):
        simple_evaluate(model=3, tasks="role_inference", dataset=str(ds))


# -- 7. the smaller habits ----------------------------------------------------------------------------


def test_output_path_as_a_json_file_is_refused_by_name(ds, tmp_path):
    rc, _, err = run(ds, tmp_path / "r.json")
    assert (
        rc == 2 and "--output_path" in err and "give a folder" in err and not (tmp_path / "r.json").exists()
    )


def test_verbosity_info_logs_the_run(ds, tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO)
    rc, _, err = run(ds, tmp_path / "r", "--verbosity", "INFO")
    assert rc == 0, err
    msgs = [r.getMessage() for r in caplog.records if r.name.startswith("harness")]
    assert any("role_inference: 10 of 10 rows" in m for m in msgs) and any(
        m.startswith("wrote ") for m in msgs
    )
    assert any("inference done" in m for m in msgs)


def test_tasks_list_shows_the_casu_group():
    rc, out, _ = cli("--tasks", "list")
    groups = out.split("groups")[1]
    assert rc == 0 and "  casu " in groups and "role_inference" in groups
    rc, out, _ = cli("list")
    assert rc == 0 and "  casu " in out.split("groups")[1].split("models:")[0]


def test_progress_outside_a_terminal_is_plain_lines(ds, tmp_path):
    rc, out, err = cli(
        "--model",
        "random",
        "--tasks",
        "role_inference",
        "--dataset",
        str(ds),
        "--output_path",
        str(tmp_path / "r"),
        "--no_probe",
    )  # stderr is a StringIO here, as in a log file
    assert rc == 0, err
    assert "\r" not in err and "\x1b" not in err
    lines = [x for x in err.splitlines() if x.startswith("random: ")]
    assert lines and lines[-1].startswith("random: 10/10 (100%)")


def test_the_plot_shows_family_accuracy_with_its_interval_and_marks_a_partial_run(ds, tmp_path):
    from harness import simple_evaluate
    from harness.output.results import accuracy_plot_data, plots

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


# -- 6. notebook audio and the safe local call, as the card prints them ----------------------------


def _blocks(card: str) -> list[str]:
    import re

    return re.findall(r"```python\n(.*?)```", card, re.S)


def test_the_cards_waveform_and_local_folder_snippets_run_from_anywhere(casu_small, tmp_path, monkeypatch):
    import shutil

    import numpy as np
    import pyarrow.parquet as pq

    card = (casu_small / "README.md").read_text()
    blocks = _blocks(card)
    wave = next(b for b in blocks if "soundfile" in b)
    local = next(b for b in blocks if "data_files" in b)
    assert len([x for x in wave.splitlines() if x.strip()]) == 2 and "torchcodec" not in wave
    # two folders of the same name with other content, loaded from a third working directory
    a, b = tmp_path / "a" / "casu_mini", tmp_path / "b" / "casu_mini"
    shutil.copytree(casu_small, a)
    shutil.copytree(casu_small, b)
    (b / "casu_build.json").unlink()  # its questions are edited below: no longer the build that wrote it
    assert 'data_files("/path/to/casu_mini", "' in local  # the card's snippet loads one named config
    for f in b.glob("*/*.parquet"):  # every question config of the second folder
        t = pq.read_table(f)
        if "question" not in t.column_names:
            continue
        q = [f"other {x}" for x in t.column("question").to_pylist()]
        import pyarrow as pa

        pq.write_table(t.set_column(t.schema.get_field_index("question"), "question", pa.array(q)), f)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    got = {}
    for folder in (a, b):
        ns: dict = {}
        exec("import datasets, casu_dataset\n" + local.replace("/path/to/casu_mini", str(folder)), ns)
        exec(wave, ns)
        got[folder] = ns["ds"][0]["question"]
        assert isinstance(ns["wav"], np.ndarray) and ns["wav"].ndim == 1 and ns["wav"].dtype == np.float32
        assert ns["sr"] == 16000 and len(ns["wav"]) > 16000
    assert got[b] == "other " + got[a]  # never the first folder's cached rows
    # the README's notebook block, as printed, on the second folder
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    nb = next(
        b for b in _blocks(readme.split("## Notebooks, the Hub and the leaderboard")[1]) if "data_files" in b
    )
    ns2: dict = {}
    exec(nb.replace("/path/to/casu_mini", str(b)), ns2)
    assert (
        ns2["ds"][0]["question"].startswith("other ") and ns2["sr"] == 16000 and ns2["items"][0].waveform.size
    )
    import casu_dataset

    x, sr = casu_dataset.waveform(ns["ds"][0])
    assert sr == 16000 and np.array_equal(x, ns["wav"])
    with pytest.raises(casu_dataset.LoadError, match="FLAC bytes"):
        casu_dataset.waveform({"audio": {"path": "x.flac"}})


def test_sample_lines_for_option_scores_rotations_and_failures():
    import lm_eval_schema as S
    from pydantic import TypeAdapter

    from harness.output.lmeval import sample_lines

    base = {"scene_id": "s", "place": "kitchen", "question": "Q?", "condition": "PEB"}
    ll = dict(
        base,
        id="q1",
        rotation=0,
        mode="loglikelihood",
        prompt="P1",
        options=["a", "b"],
        answer="B",
        scores=[-1.0, -0.5],
        parsed="B",
        correct=True,
        method="loglikelihood",
    )
    rot = [
        dict(
            base,
            id="q2",
            rotation=r,
            mode="generate",
            prompt=f"P2-{r}",
            options=["a", "b"],
            answer="A",
            response=f"Answer: {'A' if r == 0 else 'B'}",
            parsed="A" if r == 0 else "B",
            correct=r == 0,
        )
        for r in (0, 1)
    ]
    failed = dict(
        base,
        id="d1",
        rotation=0,
        mode="generate",
        prompt="Describe.",
        options=[],
        answer="",
        error="RuntimeError: boom",
        correct=False,
        parsed=None,
        method="error",
    )
    lines = {s["doc"]["id"]: s for s in sample_lines("t", [ll, *rot, failed], {"max_new_tokens": 8})}
    for line in lines.values():
        TypeAdapter(S.SampleResult).validate_python(line, strict=True)
    one = lines["q1"]
    assert one["arguments"] == {
        "gen_args_0": {"arg_0": "P1", "arg_1": "a"},
        "gen_args_1": {"arg_0": "P1", "arg_1": "b"},
    }
    assert (
        one["resps"] == [[["-1.0", "None"]], [["-0.5", "None"]]]
        and one["acc"] == 1.0
        and one["target"] == "B"
    )
    two = lines["q2"]
    assert len(two["arguments"]) == 2 and two["filtered_resps"] == ["A", "B"]
    assert two["acc"] == 1.0 and two["circular_acc"] == 0.0 and two["metrics"] == ["acc", "circular_acc"]
    bad = lines["d1"]
    assert bad["metrics"] == [] and bad["target"] == "" and bad["resps"] == [[""]]
    assert [lines[k]["doc_id"] for k in ("q1", "q2", "d1")] == [0, 1, 2]


def test_the_cli_takes_lm_evals_run_flags(ds, tmp_path):
    out = tmp_path / "r"
    rc, text, err = run(
        ds, out, "--bootstrap_iters", "0", "--write_out", "--use_cache", str(tmp_path / "c.sqlite")
    )
    assert rc == 0 and "--- role_inference: first prompt" in text and (tmp_path / "c.sqlite").is_file(), err
    lm = json.loads(next((out / "random").glob("results_*.json")).read_text())
    assert (
        lm["results"]["role_inference"]["acc_stderr,none"] == "N/A" and lm["config"]["bootstrap_iters"] == 0
    )
    rc, text, err = run(ds, tmp_path / "p", "--predict_only")
    assert rc == 0, err
    folder = tmp_path / "p" / "random"
    lm = json.loads(next(folder.glob("results_*.json")).read_text())
    assert lm["results"]["role_inference"]["bypass,none"] == 999 and lm["config"]["predict_only"] is True
    assert len(next(folder.glob("samples_role_inference_*.jsonl")).read_text().splitlines()) == 10
    rc, _, err = run(ds, tmp_path / "q", "--bootstrap_iters", "-1")
    assert rc == 2 and "--bootstrap_iters" in err
