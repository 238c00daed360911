"""Custom tasks written the lm-eval way (`--include_path DIR`): `include:` inheritance, Jinja
`doc_to_text` / `doc_to_choice` / `doc_to_target` over a CASU row's columns, `metric_list`,
`generation_kwargs` (`until`), `group`; a file that fails is skipped, named, and the others run.
Run with the random model (and a fixed-reply adapter) on the small real dataset."""

import json
import textwrap

import pytest
from conftest import call_main

from harness import simple_evaluate
from harness.cli import main
from harness.task.config import TaskConfigError, load_task, load_tasks
from model_adapters.base import Adapter

# The built-in role_inference prompt, written as lm-eval writes prompts.
BASE = """\
dataset_name: role_inference
output_type: multiple_choice
test_split: test
doc_to_text: "{{hint}}{{question}}\\n{% for o in options %}{{ 'ABCDEFGHIJ'[loop.index0] }}. \\
  {{o}}\\n{% endfor %}Answer with the option's letter from the given choices directly."
doc_to_choice: "{{options}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


class Talkative(Adapter):
    """Answers with the first option's letter, then keeps talking on the next line."""

    name = "talkative"
    uses_audio = False
    chat_template_use = "always"

    def generate(self, requests, settings):
        return ["B\nor maybe A, or C" for _ in requests]


@pytest.fixture
def task_dir(tmp_path):
    d = tmp_path / "my_tasks"
    d.mkdir()
    (d / "_base.yaml").write_text(BASE)
    (d / "roles_lm.yaml").write_text(
        'include: _base.yaml\ntask: roles_lm\ngeneration_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 8\n'
    )
    (d / "my_group.yaml").write_text("group: my_group\ntask:\n  - roles_lm\n")
    return d


def test_an_lmeval_task_gives_the_builtin_prompts_and_scores(casu_small, task_dir, tmp_path):
    common = dict(model="random", dataset=str(casu_small), limit=8, probe=False, log_samples=True)
    ours = simple_evaluate(tasks="my_group", include_path=[str(task_dir)], **common)
    builtin = simple_evaluate(tasks="role_inference", **common)
    assert list(ours.results) == ["roles_lm"]  # the group selected it
    a, b = ours.samples["roles_lm"], builtin.samples["role_inference"]
    assert [r["prompt"] for r in a] == [r["prompt"] for r in b]
    assert [r["answer"] for r in a] == [r["answer"] for r in b]
    assert [r["options"] for r in a] == [r["options"] for r in b]
    m_ours, m_builtin = ours.results["roles_lm"]["PEB"], builtin.results["role_inference"]["PEB"]
    assert m_ours["n"] == m_builtin["n"] == 8
    recorded = ours["config"]["task_configs"]["roles_lm"]
    assert recorded["doc_to_text"].startswith("{{hint}}") and recorded["generation"]["until"] == ["\n"]
    assert recorded["metrics"] == ["accuracy"] and "my_group" in recorded["tags"]
    assert "doc_to_text" not in builtin["config"]["task_configs"]["role_inference"]  # CASU's schema as before


def test_until_cuts_the_answer_as_lmeval_does(casu_small, task_dir):
    res = simple_evaluate(
        model=Talkative(),
        tasks="roles_lm",
        include_path=[str(task_dir)],
        dataset=str(casu_small),
        limit=8,
        probe=False,
    )
    recs = res.samples["roles_lm"]
    assert {r["response"] for r in recs} == {"B"} and {r["parsed"] for r in recs} == {"B"}
    assert res.document["generation"]["roles_lm"]["until"] == ["\n"]


def test_a_failing_task_file_is_skipped_and_named_the_others_run(casu_small, task_dir, tmp_path):
    (task_dir / "broken.yaml").write_text(
        "include: _base.yaml\ntask: broken\nmetric_list:\n  - metric: acc_norm\n"
    )
    out = tmp_path / "out"
    rc, stdout, err = call_main(
        main,
        ["--model", "random", "--tasks", "all", "--include_path", str(task_dir), "--dataset", str(casu_small)]
        + ["--limit", "4", "--output_path", str(out), "--quiet", "--no_probe"],
    )
    assert rc == 0, err
    assert "broken.yaml" in err and "'acc_norm' is not a registered metric" in err
    (doc_path,) = out.glob("random/casu_results_*.json")
    doc = json.loads(doc_path.read_text())
    assert "roles_lm" in doc["results"] and "broken" not in doc["results"]
    assert "| roles_lm" in stdout  # a custom task is a row of the console
    rc, _, err = call_main(
        main,
        ["--model", "random", "--tasks", "broken", "--include_path", str(task_dir)]
        + ["--dataset", str(casu_small), "--output_path", str(tmp_path / "none")],
    )
    assert rc == 2 and "broken.yaml" in err and "acc_norm" in err  # nothing left to run
    assert not (tmp_path / "none").exists()


def test_a_column_the_dataset_lacks_is_named_before_the_model(casu_small, task_dir):
    bad = "include: _base.yaml\ntask: roles_lm\ndoc_to_text: '{{speaker}}'\n"
    (task_dir / "roles_lm.yaml").write_text(bad)
    rc, _, err = call_main(
        main,
        ["--model", "qwen2-audio", "--model_args", "pretrained=/nowhere", "--tasks", "roles_lm"]
        + ["--include_path", str(task_dir), "--dataset", str(casu_small)],
    )
    assert rc == 2 and "'speaker' is undefined" in err and "roles_lm" in err and "question" in err


@pytest.mark.parametrize(
    "body, says",
    [
        ("include: _base.yaml\ntask: t\ndoc_to_text: '{{question'\n", "not a valid Jinja template"),
        ("include: nowhere.yaml\ntask: t\n", "include: nowhere.yaml: no such file"),
        ("include: t.yaml\ntask: t\n", "includes itself"),
        ("include: _base.yaml\ntask: t\nprocess_docs: !!str x\n", "process_docs: not supported"),
        ("include: _base.yaml\ntask: t\noutput_type: loglikelihood\n", "output_type 'loglikelihood'"),
        ("include: _base.yaml\ntask: t\ngeneration_kwargs: {top_k: 5}\n", "generation_kwargs.top_k"),
        ("include: _base.yaml\ntask: t\nnum_fewshot: 5\n", "zero-shot"),
        ("include: _base.yaml\ntask: t\ndoc_to_choice: null\n", "doc_to_choice"),
    ],
)
def test_bad_lmeval_task_files_name_the_file_and_the_field(task_dir, body, says):
    f = task_dir / "t.yaml"
    f.write_text(body)
    with pytest.raises(TaskConfigError, match="t.yaml") as err:
        load_task(f)
    assert says in str(err.value)


def test_lmeval_targets_by_index_letter_or_text(casu_small, tmp_path):
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "_base.yaml").write_text(BASE)
    by_text = "include: _base.yaml\ntask: by_text\ndoc_to_target: \"{{options['ABCD'.index(answer)]}}\"\n"
    (d / "by_text.yaml").write_text(by_text)
    by_index = "include: _base.yaml\ntask: by_index\ndoc_to_target: \"{{'ABCD'.index(answer)}}\"\n"
    (d / "by_index.yaml").write_text(by_index)
    assert set(load_tasks([d])) == {"by_text", "by_index"}
    res = simple_evaluate(
        model="random", tasks="by_text,by_index", include_path=[str(d)], dataset=str(casu_small), limit=8
    )
    keys = [[r["answer"] for r in res.samples[t]] for t in ("by_text", "by_index")]
    assert keys[0] == keys[1] and len(keys[0]) == 8


def test_group_file_listing_an_unknown_task_is_named(tmp_path):
    d = tmp_path / "tasks"
    d.mkdir()
    (d / "g.yaml").write_text(textwrap.dedent("group: g\ntask: [nope]\n"))
    with pytest.raises(TaskConfigError, match="group 'g' lists 'nope'"):
        load_tasks([d])
