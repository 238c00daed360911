"""The result tables and plots (harness/output/tables.py, plots.py): every task of a run is a row or column,
custom tasks (--include_path) too, and the plots show family accuracy at a scale where it is visible,
with its intervals, and say when a task had a single contrast family."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from harness.output import document as D
from harness.output import plots as P
from harness.output import tables as T

ROOT = Path(__file__).resolve().parents[1]
BUILTIN_MCQ = ["contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning"]


def _custom_tasks(d: Path) -> Path:
    """Two multiple-choice tasks (aa_role sorts before every built-in name) and a free-text one, in
    CASU's own YAML schema, on the built-in configs."""
    d.mkdir(parents=True, exist_ok=True)
    mcq = yaml.safe_load((ROOT / "tasks" / "role_inference.yaml").read_text())
    text = yaml.safe_load((ROOT / "tasks" / "scene_description.yaml").read_text())
    for name, data in (("aa_role", mcq), ("my_role", mcq), ("my_desc", text)):
        (d / f"{name}.yaml").write_text(yaml.safe_dump(dict(data, task=name)))
    return d


@pytest.fixture(scope="module")
def run(casu_small, tmp_path_factory):
    """A random-model run of every task, built-in and custom, under two conditions, written to disk."""
    from harness import simple_evaluate

    tmp = tmp_path_factory.mktemp("tables")
    out = tmp / "out"
    res = simple_evaluate(
        model="random",
        tasks="all",
        dataset=str(casu_small),
        include_path=str(_custom_tasks(tmp / "inc")),
        conditions="PEB,P__",
        output_path=str(out),
        probe=False,
    )
    return json.loads(json.dumps(res.document)), out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


# -- 1. a custom task is a row / column like the built-in ones ------------------------------------


def test_main_table_has_a_column_per_custom_task_after_the_builtin_ones(run):
    doc, _ = run
    r = doc["results"]
    assert {"aa_role", "my_role", "my_desc"} <= set(r)
    head, _, row = T.main_table(doc).splitlines()[:3]
    heads = _cells(head)
    mcq_heads = [f"{D.short(t)} acc / fam" for t in BUILTIN_MCQ] + ["aa_role acc / fam", "my_role acc / fam"]
    text_heads = ["BLEU-4", "BERTScore", "Event Match", "1 - WER"]
    assert heads == ["Model", *text_heads, *mcq_heads, *(f"my_desc {h}" for h in text_heads)]
    cells = dict(zip(heads, _cells(row)))
    for t in ("aa_role", "my_role"):
        m = r[t]["PEB"]
        want = f"{100 * m['accuracy']['value']:.2f} / {100 * m['family_accuracy']['value']:.2f}"
        assert cells[f"{t} acc / fam"] == want
    assert cells["my_desc BLEU-4"] == f"{r['my_desc']['PEB']['bleu4']['value']:.2f}"
    assert cells["my_desc BERTScore"] == f"{100 * r['my_desc']['PEB']['bertscore']['value']:.2f}"
    # the Markdown report's table 1 is the same table
    assert T.main_table(doc) in T.markdown(doc)


def test_a_custom_task_missing_from_one_run_is_a_dash_and_counts_in_a_limited_runs_n(run):
    doc, _ = run
    builtin_only = copy.deepcopy(doc)
    for t in ("aa_role", "my_role", "my_desc"):
        del builtin_only["results"][t]
    head, _, row1, row2 = T.main_table(doc, builtin_only).splitlines()[:4]
    heads = _cells(head)
    assert _cells(row2)[heads.index("my_role acc / fam")] == "-"
    assert _cells(row2)[heads.index("my_desc BLEU-4")] == "-"
    assert _cells(row1)[heads.index("my_role acc / fam")] != "-"
    limited = copy.deepcopy(doc)
    limited["config"]["limit"] = 99
    n = sum(doc["results"][t]["PEB"]["n"] for t in [*BUILTIN_MCQ, "aa_role", "my_role"])
    assert f"(--limit 99, n={n})" in T.main_table(limited)


def test_ablation_table_has_a_column_per_custom_multiple_choice_task(run):
    doc, _ = run
    lines = T.ablation_table(doc).splitlines()
    assert _cells(lines[0]) == [
        "P",
        "E",
        "B",
        "Contextual",
        "Entity",
        "Role",
        "Counterfactual",
        "aa_role",
        "my_role",
    ]
    r = doc["results"]
    for line, cond in zip(lines[2:], doc["config"]["conditions"]):
        m = r["my_role"][cond]
        assert (
            _cells(line)[-1]
            == f"{100 * m['accuracy']['value']:.2f} / {100 * m['family_accuracy']['value']:.2f}"
        )


def test_a_custom_tasks_kind_comes_from_its_config_else_from_its_metrics():
    doc = {
        "config": {"task_configs": {"x_text": {"output_type": "generate_until"}}},
        "results": {"x_mcq": {"PEB": {"accuracy": {"value": 0.5}}}, "x_text": {"PEB": {"n": 3}}},
    }
    assert D.task_kind("x_mcq", doc) == D.MCQ and D.task_kind("x_text", doc) == D.TEXT
    assert D.task_kind("role_inference", doc) == D.MCQ and D.task_kind("scene_description", doc) == D.TEXT
    assert D.mcq_tasks_in(doc) == ["x_mcq"] and D.other_tasks(D.TEXT, doc) == ["x_text"]
    assert D.short("x_mcq") == "x_mcq" and D.short("role_inference") == "Role"


def _doc(results: dict, conditions=("PEB",), limit=None) -> dict:
    return {
        "model": {"name": "m", "args": {}},
        "config": {"conditions": list(conditions), "limit": limit, "scene_hint": False},
        "results": results,
        "dataset": {},
    }


def _mcq(acc, acc_ci, fam, fam_ci, families, n=None) -> dict:
    return {
        "n": n or 4 * families,
        "accuracy": {"value": acc, "ci95": acc_ci, "n": n or 4 * families},
        "family_accuracy": {"value": fam, "ci95": fam_ci, "n": families, "families": families},
    }


def test_tables_of_builtin_tasks_only_are_as_before():
    """Built-in tasks only: table 1 and table 2, byte for byte as before custom tasks had columns."""
    m = _mcq(0.3, [0.2, 0.4], 0.02, [0.0, 0.05], 40)
    doc = _doc(
        {
            "role_inference": {"PEB": m, "P__": m},
            "contextual_reasoning": {"PEB": m, "P__": m},
            "scene_description": {"PEB": {"n": 8, "bleu4": {"value": 1.5}}},
        },
        conditions=("PEB", "P__"),
    )
    assert T.main_table(doc) == (
        "| Model | BLEU-4 | BERTScore | Event Match | 1 - WER | Contextual acc / fam | Entity acc / fam "
        "| Role acc / fam | Counterfactual acc / fam |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| m | 1.50 | - | - | - | 30.00 / 2.00 | - | 30.00 / 2.00 | - |\n"
        "\n"
        "acc: accuracy per variant (%); fam: family accuracy, all four variants of a contrast family right "
        "(%; chance 0.39)."
    )
    assert T.ablation_table(doc) == (
        "| P | E | B | Contextual | Role |\n|---|---|---|---|---|\n"
        "| ✓ | ✓ | ✓ | 30.00 / 2.00 | 30.00 / 2.00 |\n| ✓ | × | × | 30.00 / 2.00 | 30.00 / 2.00 |"
    )


# -- 2. plots that show the truth -------------------------------------------------------------------


def test_the_accuracy_plot_shows_custom_tasks_and_scales_family_accuracy_to_its_data(run):
    doc, _ = run
    data = P.accuracy_plot_data(doc)
    assert data["tasks"] == [*BUILTIN_MCQ, "aa_role", "my_role"]
    assert {b["task"] for b in data["bars"]} == set(data["tasks"])
    # casu_small: two families; the tasks with one family are named so, and get no interval
    one = [t for t in data["tasks"] if doc["results"][t]["PEB"]["family_accuracy"]["families"] == 1]
    assert one and data["too_few"] == one
    for t, label in zip(data["tasks"], data["labels"]):
        assert label == D.short(t) + ("\n(1 family: too few)" if t in one else "")
    for b in data["bars"]:
        assert (b["lo"] is None and b["hi"] is None) == (b["task"] in one)
    # random answers: family accuracy near 0, so its axis is a few %, not 0-100
    fam_top = max(b["hi"] or b["value"] for b in data["bars"] if b["metric"] == "family_accuracy")
    assert fam_top < 5 and data["ylim"]["family_accuracy"] == 5.0
    assert 25 < data["ylim"]["accuracy"] <= 105


def test_plot_axes_come_from_the_intervals_and_a_single_family_does_not_set_them():
    doc = _doc(
        {
            "role_inference": {"PEB": _mcq(0.30, [0.22, 0.38], 0.02, [0.0, 0.06], 40)},
            "entity_extraction": {"PEB": _mcq(0.45, [0.35, 0.55], 0.035, [0.01, 0.07], 40)},
            # one family: a point "interval" that says nothing, and a family accuracy of 0 or 100%
            "contextual_reasoning": {"PEB": _mcq(0.5, [0.5, 0.5], 1.0, [1.0, 1.0], 1)},
        }
    )
    data = P.accuracy_plot_data(doc)
    assert data["tasks"] == ["contextual_reasoning", "entity_extraction", "role_inference"]
    assert data["too_few"] == ["contextual_reasoning"]
    assert data["labels"][0] == "Contextual\n(1 family: too few)"
    fam = {b["task"]: b for b in data["bars"] if b["metric"] == "family_accuracy"}
    assert fam["role_inference"] == {
        "task": "role_inference",
        "metric": "family_accuracy",
        "value": 2.0,
        "lo": 0.0,
        "hi": 6.0,
    }
    assert fam["contextual_reasoning"]["lo"] is None and fam["contextual_reasoning"]["value"] == 100.0
    # up to the largest upper end (7%) with headroom; the one family's 100% does not stretch it
    assert data["ylim"]["family_accuracy"] == pytest.approx(1.15 * 7.0 + 1.0)
    # accuracy: up to 55% with headroom
    assert data["ylim"]["accuracy"] == pytest.approx(1.15 * 55.0 + 1.0)


def test_the_ablation_heatmap_has_family_accuracy_and_custom_tasks(run):
    doc, _ = run
    heat = P.ablation_plot_data(doc)
    assert heat["conditions"] == ["PEB", "P__"] and heat["tasks"] == [*BUILTIN_MCQ, "aa_role", "my_role"]
    for metric in ("accuracy", "family_accuracy"):
        for i, c in enumerate(heat["conditions"]):
            for j, t in enumerate(heat["tasks"]):
                assert heat[metric][i][j] == pytest.approx(100 * doc["results"][t][c][metric]["value"])
    assert heat["vmax"] == {"accuracy": 100.0, "family_accuracy": 5.0}
    assert P.ablation_plot_data(dict(doc, config=dict(doc["config"], conditions=["PEB"]))) is None


def test_an_accuracy_of_zero_is_zero_in_the_heatmap_not_missing():
    m0 = _mcq(0.0, [0.0, 0.0], 0.0, [0.0, 0.0], 10)
    doc = _doc({"role_inference": {"PEB": m0, "___": m0}}, conditions=("PEB", "___"))
    heat = P.ablation_plot_data(doc)
    assert heat["accuracy"] == [[0.0], [0.0]] and heat["family_accuracy"] == [[0.0], [0.0]]
    doc["results"]["role_inference"]["___"] = {"n": 0}  # not evaluated under that condition
    assert P.ablation_plot_data(doc)["accuracy"] == [[0.0], [None]]


def test_the_run_writes_both_plots_and_they_are_pngs(run, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import image

    doc, out = run
    folder = next(out.glob("random*"))
    stamp = sorted(folder.glob("casu_results_*.json"))[-1].stem[len("casu_results_") :]
    pngs = [folder / f"accuracy_by_task_{stamp}.png", folder / f"ablation_heatmap_{stamp}.png"]
    # and again from the document, with a task of one family and one without family data
    doc = copy.deepcopy(doc)
    del doc["results"]["aa_role"]["PEB"]["family_accuracy"]
    pngs += P.plots(doc, tmp_path, "_again")
    assert [p.name for p in pngs[2:]] == ["accuracy_by_task_again.png", "ablation_heatmap_again.png"]
    for p in pngs:
        img = image.imread(p)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 400, (p, img.shape)
