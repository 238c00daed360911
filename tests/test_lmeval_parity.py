"""lm-eval parity of the harness (issue 43): a task's templates see the row as stored (doc_to_choice never
replaces a column, also under --circular), `--gen_kwargs` and `--seed` parse as lm-eval 0.4.13 parses
them, group files score their groups (`aggregate_metric_list`), `task_alias`, `fewshot_config`,
`exact_match`, `dataset_path`, `ls`, the short flags and `!function`. Run with the random model (and
small text-only adapters) on the small real datasets; the expected numbers of lm-eval's own
functions were computed with lm-eval 0.4.13 (noted where used)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import call_main, tiny_dataset

from harness import simple_evaluate
from harness.cli import main
from harness.config import EvalConfig, apply_seeds, parse_gen_kwargs, parse_seed
from model_adapters.base import Adapter

LETTERS = "ABCDEFGHIJ"

# lm-eval's mmlu template (lm_eval/tasks/mmlu/default/_default_template_yaml), its `choices` column
# written as CASU's `options`
MMLU = """\
task: roles_mmlu
dataset_name: role_inference
output_type: multiple_choice
doc_to_text: "{{question.strip()}}\\nA. {{options[0]}}\\nB. {{options[1]}}\\
  \\nC. {{options[2]}}\\nD. {{options[3]}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
metric_list:
  - metric: acc
  - metric: circular_acc
"""


def _write(d, files: dict):
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


def _doc(out) -> dict:
    (path,) = sorted(out.glob("*/casu_results_*.json"))[-1:]
    return json.loads(path.read_text())


def _lm(out) -> dict:
    (path,) = sorted(out.glob("*/results_*.json"))[-1:]
    return json.loads(path.read_text())


# -- 1. a row's columns are never replaced by doc_to_choice -------------------------------------------


@pytest.mark.parametrize("column", ["options", "choices"])  # mmlu's own column name reads the options too
def test_an_mmlu_template_renders_the_option_texts(casu_small, tmp_path, column):
    d = _write(tmp_path / "t", {"mmlu.yaml": MMLU.replace("options[", f"{column}[")})
    common = dict(model="random", dataset=str(casu_small), limit=8, probe=False, log_samples=True)
    ours = simple_evaluate(tasks="roles_mmlu", include_path=[str(d)], **common)
    builtin = simple_evaluate(tasks="role_inference", **common)
    recs, refs = ours.samples["roles_mmlu"], builtin.samples["role_inference"]
    assert len(recs) == 8
    for r, b in zip(recs, refs):
        opts = b["options"]  # the row's options, as the built-in task offers them
        assert len(opts) == 4 and opts != list("ABCD")
        assert (
            r["prompt"]
            == b["question"].strip() + "".join(f"\n{L}. {o}" for L, o in zip("ABCD", opts)) + "\nAnswer:"
        )
        assert "A. A\n" not in r["prompt"]
        assert r["options"] == list("ABCD") and r["answer"] == b["answer"]  # the choices, the key
    # lm-eval's sample lines: `doc` is the row as stored (its options), the target the key's letter
    for line, b in zip(ours["samples"]["roles_mmlu"], refs):
        assert line["doc"]["options"] == b["options"] and line["target"] == b["answer"]


def test_circular_rotates_the_row_and_keeps_the_key_under_an_mmlu_template(casu_small, tmp_path):
    d = _write(tmp_path / "t", {"mmlu.yaml": MMLU})
    common = dict(model="random", dataset=str(casu_small), limit=4, probe=False, circular=True)
    ours = simple_evaluate(tasks="roles_mmlu", include_path=[str(d)], **common)
    builtin = simple_evaluate(tasks="role_inference", **common)
    by_key = {(b["id"], b["rotation"]): b for b in builtin.samples["role_inference"]}
    recs = ours.samples["roles_mmlu"]
    assert len(recs) == 16 and {r["rotation"] for r in recs} == {0, 1, 2, 3}
    for r in recs:
        b = by_key[(r["id"], r["rotation"])]  # the built-in task's rotation of the same row
        for L, o in zip("ABCD", b["options"]):
            assert f"\n{L}. {o}\n" in r["prompt"] + "\n"
        assert r["answer"] == b["answer"] and r["options"] == list("ABCD")  # the key moved with its option
    assert len({r["prompt"] for r in recs if r["id"] == recs[0]["id"]}) == 4  # four different prompts
    assert ours.results["roles_mmlu"]["PEB"]["circular_accuracy"]["n"] == 4


# -- 2. --gen_kwargs as lm-eval parses it -------------------------------------------------------------


def test_gen_kwargs_parse_as_lm_eval_parses_them(casu_small, tmp_path):
    # lm-eval 0.4.13 (_cli/utils.MergeDictAction) gives exactly these
    assert parse_gen_kwargs('temperature=0,max_gen_toks=8,until=["\\n"]') == {
        "temperature": 0,
        "until": ["\n"],
        "max_new_tokens": 8,
    }
    assert parse_gen_kwargs(['{"until": ["\\n\\n"], "max_gen_toks": 4}']) == {
        "until": ["\n\n"],
        "max_new_tokens": 4,
    }
    assert parse_gen_kwargs(["do_sample=true", "temperature=0.5"]) == {"do_sample": True, "temperature": 0.5}
    assert parse_gen_kwargs("until=</s>") == {"until": ["</s>"]}
    out = tmp_path / "out"
    argv = ["--model", "random", "--tasks", "role_inference", "--dataset", str(casu_small), "--limit", "4"]
    argv += [
        "--output_path",
        str(out),
        "--quiet",
        "--no_probe",
        "--gen_kwargs",
        'temperature=0,max_gen_toks=8,until=["\\n"]',
    ]
    rc, _, err = call_main(main, argv)
    assert rc == 0, err
    doc, lm = _doc(out), _lm(out)
    assert doc["config"]["gen_kwargs"]["until"] == ["\n"] == lm["config"]["gen_kwargs"]["until"]
    assert (
        doc["generation"]["role_inference"]["until"] == ["\n"]
        and doc["generation"]["role_inference"]["max_new_tokens"] == 8
    )
    rc, _, err = call_main(
        main, [*argv[:-2], "--gen_kwargs", "temperature=0", "max_gen_toks=6"]
    )  # lm-eval's words
    assert rc == 0, err
    assert _doc(out)["config"]["gen_kwargs"] == {"temperature": 0, "max_new_tokens": 6}
    rc, _, err = call_main(main, [*argv[:-2], "--gen_kwargs", "{bad json"])
    assert rc == 2 and "--gen_kwargs" in err and "JSON" in err and len(err.strip().splitlines()) == 1


# -- 3. --seed as lm-eval's ---------------------------------------------------------------------------


def test_seed_takes_lm_evals_default_and_seeds_each_generator(casu_small, tmp_path):
    assert parse_seed("0,1234,1234,1234") == [0, 1234, 1234, 1234]
    assert parse_seed("5") == [5, 5, 5, 5] and parse_seed("1,2,3") == [1, 2, 3, 1234]
    assert parse_seed("None,7,None,9") == [None, 7, None, 9]
    c = EvalConfig(model="random", seed="11,12,13,14")
    assert (c.seed, c.random_seed, c.numpy_random_seed, c.torch_random_seed, c.fewshot_random_seed) == (
        11,
        11,
        12,
        13,
        14,
    )
    import torch

    apply_seeds(c)
    assert random.random() == random.Random(11).random()
    assert np.random.random() == np.random.RandomState(12).random_sample()
    assert torch.rand(1).item() == torch.rand(1, generator=torch.Generator().manual_seed(13)).item()
    np.random.seed(99)
    before = np.random.get_state()[1].copy()
    apply_seeds(EvalConfig(model="random", seed="None,None,None,None"))  # None: left alone
    assert (np.random.get_state()[1] == before).all()
    out = tmp_path / "out"
    base = ["--model", "random", "--tasks", "role_inference", "--dataset", str(casu_small), "--limit", "4"]
    base += ["--output_path", str(out), "--quiet", "--no_probe"]
    for seed, want in (
        (None, [0, 1234, 1234, 1234]),
        ("0,1234,1234,1234", [0, 1234, 1234, 1234]),
        ("5", [5, 5, 5, 5]),
        ("None,7,None,9", [None, 7, None, 9]),
    ):
        rc, _, err = call_main(main, base + (["--seed", seed] if seed else []))
        assert rc == 0, (seed, err)
        cfg = _lm(out)["config"]
        assert [cfg["random_seed"], cfg["numpy_seed"], cfg["torch_seed"], cfg["fewshot_seed"]] == want, seed
        doc = _doc(out)["config"]
        assert doc["seed"] == (want[0] or 0) and doc["numpy_random_seed"] == want[1]
    rc, _, err = call_main(main, base + ["--seed", "1,2"])
    assert rc == 2 and "--seed" in err and len(err.strip().splitlines()) == 1


# -- 4. groups with aggregate_metric_list ------------------------------------------------------------

TASK = """\
task: {name}
dataset_name: {config}
output_type: multiple_choice
doc_to_text: "{{{{question}}}}\\n{{% for o in options %}}\\
  {{{{ 'ABCD'[loop.index0] }}}}. {{{{o}}}}\\n{{% endfor %}}Answer:"
doc_to_choice: "{{{{options}}}}"
doc_to_target: "{{{{answer}}}}"
"""


def test_group_scores_match_lm_evals_aggregation():
    from harness.output.lmeval import group_scores

    def ci(m, se):
        return [m - 1.959964 * se, m + 1.959964 * se]

    res = {
        "a": {"PEB": {"n": 10, "accuracy": {"value": 0.5, "ci95": ci(0.5, 0.1)}}},
        "b": {"PEB": {"n": 30, "accuracy": {"value": 0.8, "ci95": ci(0.8, 0.05)}}},
    }
    # lm-eval 0.4.13: aggregate_subtask_metrics, pooled_sample_stderr / unweighted_mean_stderr
    for weight, value, stderr in ((True, 0.725, 0.04497806482930845), (False, 0.65, 0.05590169943749475)):
        agg = [{"metric": "acc", "weight_by_size": weight, "filter_list": None}]
        got = group_scores({"task": ["a", "b"], "aggregate_metric_list": agg}, res)["PEB"]["accuracy"]
        assert got["value"] == pytest.approx(value, abs=1e-12) and got["stderr"] == pytest.approx(
            stderr, abs=1e-12
        )
        assert got["n"] == 40
    res["a"]["PEB"]["accuracy"]["ci95"] = None  # a member without an interval: lm-eval's "N/A"
    agg = [{"metric": "accuracy", "weight_by_size": True, "filter_list": ["none"]}]
    assert (
        group_scores({"task": ["a", "b"], "aggregate_metric_list": [dict(agg[0], metric="acc")]}, res)["PEB"][
            "accuracy"
        ]["stderr"]
        is None
    )


def test_a_group_file_with_aggregate_metric_list_gives_a_group_score(casu_small, tmp_path):
    d = _write(
        tmp_path / "t",
        {
            "roles.yaml": TASK.format(name="roles_lm", config="role_inference"),
            "ctx.yaml": TASK.format(name="ctx_lm", config="contextual_reasoning"),
            "group.yaml": "group: casu_lm\ngroup_alias: CASU (lm-eval)\ntask: [roles_lm, ctx_lm]\n"
            "aggregate_metric_list:\n  - metric: acc\n    aggregation: mean\n    weight_by_size: true\n"
            "metadata:\n  version: 2\n",
            "plain.yaml": "group: plain\ntask: [roles_lm]\n",
        },
    )
    out = tmp_path / "out"
    argv = [
        "--model",
        "random",
        "--tasks",
        "casu_lm,plain",
        "--include_path",
        str(d),
        "--dataset",
        str(casu_small),
    ]
    rc, _, err = call_main(
        main, argv + ["--output_path", str(out), "--quiet", "--no_probe", "--conditions", "PEB,P__"]
    )
    assert rc == 0, err
    doc, lm = _doc(out), _lm(out)
    g = doc["groups"]["casu_lm"]
    assert g["tasks"] == ["roles_lm", "ctx_lm"] and g["alias"] == "CASU (lm-eval)"
    for cond, filt in (("PEB", "none"), ("P__", "P__")):
        acc = {t: doc["results"][t][cond]["accuracy"]["value"] for t in g["tasks"]}
        n = {t: doc["results"][t]["PEB"]["n"] for t in g["tasks"]}
        want = sum(acc[t] * n[t] for t in acc) / sum(n.values())
        assert g["results"][cond]["accuracy"]["value"] == pytest.approx(want, abs=1e-12)
        assert lm["groups"]["casu_lm"][f"acc,{filt}"] == pytest.approx(want, abs=1e-12)
        assert isinstance(lm["groups"]["casu_lm"][f"acc_stderr,{filt}"], float)
    assert (
        lm["groups"]["casu_lm"]["alias"] == "CASU (lm-eval)"
        and lm["results"]["casu_lm"] == lm["groups"]["casu_lm"]
    )
    assert lm["group_subtasks"]["casu_lm"] == ["roles_lm", "ctx_lm"] and lm["group_subtasks"]["plain"] == [
        "roles_lm"
    ]
    assert "plain" not in lm["groups"] and doc["groups"]["plain"]["results"] == {}  # no aggregate_metric_list
    assert lm["versions"]["casu_lm"] == "2" and lm["higher_is_better"]["casu_lm"] == {"acc": True}
    from pydantic import TypeAdapter

    from harness.output import lm_eval_schema as S

    TypeAdapter(S.EvalResults).validate_python(lm, strict=True)  # still lm-eval 0.4.13's schema
    # a bad aggregate_metric_list names the file and the field
    (d / "bad.yaml").write_text(
        "group: bad\ntask: [roles_lm]\naggregate_metric_list:\n  - metric: acc\n    aggregation: median\n"
    )
    rc, _, err = call_main(main, argv + ["--output_path", str(tmp_path / "o2")])
    assert "bad.yaml" in err and "aggregation 'median'" in err


# -- 5. task_alias, fewshot_config -------------------------------------------------------------------


def test_task_alias_is_shown_and_recorded_and_fewshot_config_is_accepted(casu_small, tmp_path):
    task = TASK.format(name="roles_lm", config="role_inference")
    d = _write(
        tmp_path / "t",
        {
            "roles.yaml": task
            + "task_alias: Roles (lm)\nnum_fewshot: 0\nfewshot_config:\n  sampler: first_n\n"
        },
    )
    out = tmp_path / "out"
    argv = [
        "--model",
        "random",
        "--tasks",
        "roles_lm",
        "--include_path",
        str(d),
        "--dataset",
        str(casu_small),
    ]
    rc, text, err = call_main(
        main, argv + ["--limit", "4", "--output_path", str(out), "--quiet", "--no_probe"]
    )
    assert rc == 0, err
    lm = _lm(out)
    assert (
        lm["results"]["roles_lm"]["alias"] == "Roles (lm)"
        and lm["configs"]["roles_lm"]["alias"] == "Roles (lm)"
    )
    assert "Roles (lm) acc / fam" in text.splitlines()[0]  # the table's column
    assert _doc(out)["config"]["task_configs"]["roles_lm"]["lmeval_source"]["fewshot_config"] == {
        "sampler": "first_n"
    }
    (d / "roles.yaml").write_text(task + "num_fewshot: 2\nfewshot_config:\n  sampler: first_n\n")
    rc, _, err = call_main(main, argv + ["--output_path", str(tmp_path / "o2")])
    assert rc == 2 and "roles.yaml" in err and "zero-shot" in err


# -- 6. exact_match ----------------------------------------------------------------------------------


class PlaceGuesser(Adapter):
    """Replies with the place the prompt names, padded with whitespace and followed by a second line,
    to the requests whose id is in `right`; 'nowhere' to the others."""

    name = "place-guesser"
    uses_audio = False
    chat_template_use = "always"
    right: set = set()

    def generate(self, requests, settings):
        place = [r.prompt.removeprefix("Where is it? ") for r in requests]
        return [f"  {p} \n more" if r.id in self.right else "nowhere" for p, r in zip(place, requests)]


def test_exact_match_is_a_registered_metric_for_generate_until(casu_small, tmp_path):
    ds = casu_small
    d = _write(
        tmp_path / "t",
        {
            "where.yaml": "task: where\ndataset_name: scene_description\noutput_type: generate_until\n"
            'doc_to_text: "Where is it? {{place}}"\ndoc_to_target: "{{place}}"\n'
            'generation_kwargs:\n  until: ["\\n"]\nmetric_list:\n  - metric: exact_match\n'
        },
    )

    def run():
        return simple_evaluate(
            model=PlaceGuesser(),
            tasks="where",
            include_path=[str(d)],
            dataset=str(ds),
            probe=False,
            log_samples=True,
        )

    PlaceGuesser.right = set()
    ids = [r["id"] for r in run().samples["where"]]
    assert len(ids) >= 4
    PlaceGuesser.right = set(ids[::2])
    res = run()
    recs = res.samples["where"]
    want = [float(i % 2 == 0) for i in range(len(ids))]
    assert [r["exact_match"] for r in recs] == want  # "  PLACE " (cut at until) stripped equals the target
    assert all(r["response"].strip() == r["reference"] for r in recs[::2])
    mean = sum(want) / len(want)
    assert res.results["where"]["PEB"]["exact_match"]["value"] == pytest.approx(mean)
    assert res["results"]["where"]["exact_match,none"] == pytest.approx(mean)
    assert [line["exact_match"] for line in res["samples"]["where"]] == want
    assert "bleu4" not in res.results["where"]["PEB"]  # only the metrics the task lists
    (d / "where.yaml").write_text((d / "where.yaml").read_text() + "    ignore_case: true\n")
    with pytest.raises(Exception, match="where.yaml.*exact_match.*default options"):
        simple_evaluate(
            model=PlaceGuesser(), tasks="where", include_path=[str(d)], dataset=str(ds), probe=False
        )


# -- 7. dataset_path ---------------------------------------------------------------------------------


def test_dataset_path_is_read_and_dataset_overrides_it(casu_small, tmp_path):
    other = tiny_dataset(tmp_path / "other", 4, "dp")
    task = TASK.format(name="roles_lm", config="role_inference")
    d = _write(tmp_path / "t", {"roles.yaml": task + f"dataset_path: {casu_small}\n"})
    out = tmp_path / "out"
    argv = ["--model", "random", "--tasks", "roles_lm", "--include_path", str(d), "--limit", "4"]
    argv += ["--output_path", str(out), "--quiet", "--no_probe"]
    rc, text, err = call_main(main, argv)
    assert rc == 0, err
    doc = _doc(out)
    assert doc["dataset"]["path"] == str(casu_small) and "roles.yaml" in doc["dataset"]["named_by"]
    assert f"from {casu_small}" in text
    rc, _, err = call_main(main, argv + ["--dataset", str(other)])  # --dataset wins
    assert rc == 0, err
    assert _doc(out)["dataset"]["path"] == str(other) and _doc(out)["dataset"]["named_by"] == "--dataset"
    # two tasks naming two datasets: one line naming both files
    (d / "ctx.yaml").write_text(
        TASK.format(name="ctx_lm", config="role_inference") + f"dataset_path: {other}\n"
    )
    rc, _, err = call_main(main, [*argv[:3], "roles_lm,ctx_lm", *argv[4:]])
    assert rc == 2 and "roles.yaml" in err and "ctx.yaml" in err and "--dataset" in err, err
    assert len(err.strip().splitlines()) == 1
    # a dataset_path that is not there: the file and the key are named
    (d / "ctx.yaml").unlink()
    (d / "roles.yaml").write_text(task + f"dataset_path: {tmp_path / 'nowhere'}\n")
    rc, _, err = call_main(main, argv)
    assert rc == 2 and "dataset_path" in err and "roles.yaml" in err and "no such folder" in err, err


# -- 8. ls, -o, -s -----------------------------------------------------------------------------------


def test_ls_and_lm_evals_short_flags(casu_small, tmp_path):
    d = _write(
        tmp_path / "t",
        {
            "roles.yaml": TASK.format(name="roles_lm", config="role_inference"),
            "group.yaml": "group: casu_lm\ntask: [roles_lm]\naggregate_metric_list:\n  - metric: acc\n",
        },
    )
    rc, text, err = call_main(main, ["ls", "tasks", "--include_path", str(d)])
    assert rc == 0, err
    assert "|Group" in text and "casu_lm" in text and "|Tag" in text and "|casu" in text
    assert "roles_lm" in text and "role_inference" in text and "multiple_choice" in text
    rc, text, _ = call_main(main, ["ls", "groups", "--include_path", str(d)])
    assert rc == 0 and "casu_lm" in text and "roles_lm" not in text and "|Tag" not in text
    rc, text, _ = call_main(main, ["ls", "subtasks"])
    assert rc == 0 and "role_inference" in text and "|Group" not in text
    rc, text, _ = call_main(main, ["ls", "tags"])
    assert rc == 0 and "|casu" in text and "role_inference" not in text
    rc, text, _ = call_main(main, ["ls"])
    assert rc == 0 and "tasks,groups,subtasks,tags" in text.replace(" ", "").replace("{", "").replace("}", "")
    out = tmp_path / "out"
    rc, _, err = call_main(
        main,
        [
            "-M",
            "random",
            "-t",
            "role_inference",
            "--dataset",
            str(casu_small),
            "-L",
            "4",
            "-o",
            str(out),
            "-s",
        ]
        + ["--quiet", "--no_probe"],
    )
    assert rc == 0, err
    assert len(list(out.glob("random/samples_role_inference_*.jsonl"))) == 1


# -- 9. !function ------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["task", "include"])
def test_function_tags_are_one_line_naming_the_file(casu_small, tmp_path, where):
    hook = "process_docs: !function utils.process_docs\n"
    task = TASK.format(name="roles_lm", config="role_inference")
    files = (
        {"roles.yaml": task + hook}
        if where == "task"
        else {
            "_base.yaml": task.replace("task: roles_lm\n", "") + hook,
            "roles.yaml": "include: _base.yaml\ntask: roles_lm\n",
        }
    )
    d = _write(tmp_path / "t", files)
    rc, _, err = call_main(
        main,
        ["--model", "random", "--tasks", "roles_lm", "--include_path", str(d), "--dataset", str(casu_small)]
        + ["--output_path", str(tmp_path / "out")],
    )
    assert rc == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "!function utils.process_docs" in err and "does not run Python" in err and "Traceback" not in err
    assert ("_base.yaml" if where == "include" else "roles.yaml") in err
    rc, _, err = call_main(main, ["validate", str(d / "roles.yaml")])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "!function" in err
