"""Habits of lm-eval users, kept: its flags (--tasks list, --gen_kwargs, a fractional --limit,
--verbosity, --device, --hf_hub_log_args, --bootstrap_iters, --write_out, --use_cache,
--predict_only), results keyed by checkpoint, the model arguments of its HF models, its
results and sample files (validated against lm-eval's own schema, CASU's records beside them)
and a notebook-first simple_evaluate that takes lm-eval's keywords and a loaded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import harness_cli, harness_run, tiny_dataset


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    return tiny_dataset(tmp_path_factory.mktemp("lm") / "ds", 10, "lm")


# -- lm-eval's flags -----------------------------------------------------------------------------


def test_tasks_list_prints_tasks_without_a_model():
    rc, out, _ = harness_cli("--tasks", "list")
    assert rc == 0 and "role_inference" in out and "scene_description" in out


def test_tasks_list_shows_the_casu_group():
    rc, out, _ = harness_cli("--tasks", "list")
    groups = out.split("groups")[1]
    assert rc == 0 and "  casu " in groups and "role_inference" in groups
    rc, out, _ = harness_cli("list")
    assert rc == 0 and "  casu " in out.split("groups")[1].split("models:")[0]


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
    # typed as lm-eval types them
    assert res["config"]["gen_kwargs"] == {"max_new_tokens": 7, "do_sample": True, "temperature": 0.5}
    assert res["config"]["task_configs"]["role_inference"]["generation"]["max_new_tokens"] == 7


def test_fractional_limit_takes_that_share_of_each_task_and_warns(ds, tmp_path):
    rc, out, err = harness_run(ds, tmp_path / "r", "--limit", "0.3")
    assert rc == 0, err
    doc = json.loads(next((tmp_path / "r").glob("*/casu_results_*.json")).read_text())
    assert doc["evaluated"]["samples"] == 3 and doc["config"]["limit"] == 0.3  # ceil(0.3 * 10)
    assert "WARNING: --limit 0.3" in err
    row = out.splitlines()[2]
    assert "(--limit 0.3, n=3)" in row and " n=3" in row and "[" in row  # n and the 95% CI in the table


def test_verbosity_sets_the_log_level(ds, tmp_path):
    import logging

    rc, _, err = harness_run(ds, tmp_path / "r", "--verbosity", "debug", "--limit", "2")
    assert rc == 0, err
    assert logging.getLogger("harness").level == logging.DEBUG
    logging.getLogger().setLevel(logging.WARNING)


def test_verbosity_info_logs_the_run(ds, tmp_path, caplog):
    import logging

    caplog.set_level(logging.INFO)
    rc, _, err = harness_run(ds, tmp_path / "r", "--verbosity", "INFO")
    assert rc == 0, err
    msgs = [r.getMessage() for r in caplog.records if r.name.startswith("harness")]
    assert any("role_inference: 10 of 10 rows" in m for m in msgs) and any(
        m.startswith("wrote ") for m in msgs
    )
    assert any("inference done" in m for m in msgs)


def test_device_cuda_fails_up_front_without_cuda(ds, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rc, _, err = harness_run(ds, tmp_path / "r", "--device", "cuda")
    assert rc == 2 and "--device cuda: CUDA is not available" in err
    assert not list((tmp_path / "r").glob("*/results_*.json"))
    # the baselines take --device cpu
    rc, _, err = harness_run(ds, tmp_path / "r", "--device", "cpu", "--limit", "2")
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


def test_output_path_as_a_json_file_is_refused_by_name(ds, tmp_path):
    rc, _, err = harness_run(ds, tmp_path / "r.json")
    assert (
        rc == 2 and "--output_path" in err and "give a folder" in err and not (tmp_path / "r.json").exists()
    )


def test_the_cli_takes_lm_evals_run_flags(ds, tmp_path):
    out = tmp_path / "r"
    rc, text, err = harness_run(
        ds, out, "--bootstrap_iters", "0", "--write_out", "--use_cache", str(tmp_path / "c.sqlite")
    )
    assert rc == 0 and "--- role_inference: first prompt" in text and (tmp_path / "c.sqlite").is_file(), err
    lm = json.loads(next((out / "random").glob("results_*.json")).read_text())
    assert (
        lm["results"]["role_inference"]["acc_stderr,none"] == "N/A" and lm["config"]["bootstrap_iters"] == 0
    )
    rc, text, err = harness_run(ds, tmp_path / "p", "--predict_only")
    assert rc == 0, err
    folder = tmp_path / "p" / "random"
    lm = json.loads(next(folder.glob("results_*.json")).read_text())
    assert lm["results"]["role_inference"]["bypass,none"] == 999 and lm["config"]["predict_only"] is True
    assert len(next(folder.glob("samples_role_inference_*.jsonl")).read_text().splitlines()) == 10
    rc, _, err = harness_run(ds, tmp_path / "q", "--bootstrap_iters", "-1")
    assert rc == 2 and "--bootstrap_iters" in err


# -- results keyed by checkpoint -----------------------------------------------------------------


def test_two_checkpoints_get_their_own_folder_and_table_row(ds, tmp_path, ckpt_model):
    out = tmp_path / "r"
    for ck, conds in (("Org/Model-A", "all"), ("Org/Model-B", "full"), ("Org/Model-A", "full")):
        rc, _, err = harness_run(
            ds,
            out,
            "--model_args",
            f"pretrained={ck}",
            "--conditions",
            conds,
            model=ckpt_model,
        )
        assert rc == 0, err
    a, b = out / "plugin_adapters__Ckpt__Org__Model-A", out / "plugin_adapters__Ckpt__Org__Model-B"
    assert a.is_dir() and b.is_dir()
    a_runs = sorted(a.glob("results_*.json"))
    assert len(a_runs) == 2 and len(list(a.glob("results_*.md"))) == 2  # no report overwritten
    # the heatmap belongs to the first (all-conditions) run only; the newer run has none
    stamps = [f.stem[len("results_") :] for f in a_runs]
    assert (a / f"ablation_heatmap_{stamps[0]}.png").is_file() and not (
        a / f"ablation_heatmap_{stamps[1]}.png"
    ).exists()
    assert not (a / "ablation_heatmap.png").exists() and not (a / "results.md").exists()
    rc, table, _ = harness_cli("table", str(out))
    rows = [row for row in table.splitlines() if row.startswith("| plugin_adapters")]
    assert rc == 0 and len(rows) == 2 and "(Org/Model-A)" in rows[0] and "(Org/Model-B)" in rows[1]


def test_table_reads_an_old_adapter_keyed_folder(ds, tmp_path, ckpt_model):
    """Folders keyed by adapter only (<out>/<adapter>/, the layout without checkpoint keys) still
    count, one row per checkpoint."""
    out = tmp_path / "r"
    for ck in ("X/one", "X/two"):
        rc, _, err = harness_run(ds, out, "--model_args", f"pretrained={ck}", model=ckpt_model)
        assert rc == 0, err
    old = out / "ckpt"
    old.mkdir()
    # rename the runs as the adapter-keyed layout names them
    for f in out.glob("plugin_adapters__Ckpt__*/casu_results_*.json"):
        f.rename(old / f"{f.stem[len('casu_') :]}-{f.parent.name[-3:]}.json")
    rc, table, err = harness_cli("table", str(out))
    assert rc == 0, err
    assert sum(row.startswith("| plugin_adapters") for row in table.splitlines()) == 2


# -- the model arguments of lm-eval's HF models --------------------------------------------------


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
        rc, _, err = harness_run(ds, tmp_path / "r", "--model_args", args, model="qwen2-audio")
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


# -- lm-eval's results and sample files ----------------------------------------------------------


def test_lm_eval_view_has_lm_evals_keys_with_the_projects_values(ds, tmp_path):
    from casu_dataset.contract import FULL_CONDITION

    out = tmp_path / "r"
    rc, _, err = harness_run(
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
    assert lm["config"]["gen_kwargs"] == {"max_new_tokens": 9}  # typed as lm-eval types it
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


# lm_eval/utils.py's readers, copied: what lm-eval's tools (the Hub tracker card, zeno) glob for
def get_results_filenames(filenames):
    return [f for f in filenames if "/results_" in f and ".json" in f]


def get_sample_results_filenames(filenames):
    return [f for f in filenames if "/samples_" in f and ".json" in f]


def get_file_datetime(filename):
    return filename[filename.rfind("_") + 1 :].replace(".jsonl", "")


def get_latest_filename(filenames):
    return max(filenames, key=lambda f: get_file_datetime(f))


def test_the_written_files_are_lm_evals_schema_and_casus_own_is_beside_them(ds, tmp_path, ckpt_model):
    import hashlib

    from pydantic import TypeAdapter

    from harness.output import lm_eval_schema as S

    out = tmp_path / "r"
    rc, _, err = harness_run(
        ds,
        out,
        "--conditions",
        "PEB,P__",
        "--log_samples",
        "--model_args",
        "pretrained=Org/M",
        "--system_instruction",
        "Answer briefly.",
        model=ckpt_model,
    )
    assert rc == 0, err
    folder = out / "plugin_adapters__Ckpt__Org__M"
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
    assert latest["model_name_sanitized"] == "Org__M" and latest["model_source"] == ckpt_model
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
    from pydantic import TypeAdapter

    from harness import simple_evaluate
    from harness.output import lm_eval_schema as S

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


def test_sample_lines_for_option_scores_rotations_and_failures():
    from pydantic import TypeAdapter

    from harness.output import lm_eval_schema as S
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


# -- simple_evaluate as lm-eval's, with a model loaded once --------------------------------------


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
        ({"numpy_random_seed": -1}, "numpy_random_seed=-1"),
        ({"bootstrap_iters": -1}, "bootstrap_iters=-1"),
        ({"bootstrap_iters": 10**9}, r"bootstrap_iters=1000000000: an integer in 0\.\.1,000,000"),
        ({"verbosity": "LOUD"}, "--verbosity 'LOUD'"),
    ):
        with pytest.raises(UsageError, match=why):
            simple_evaluate(model=adapter, tasks="role_inference", dataset=str(ds), probe=False, **kw)
    with pytest.raises(UsageError, match="model=int"):
        simple_evaluate(model=3, tasks="role_inference", dataset=str(ds))
