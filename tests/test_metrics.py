"""Every metric against values computed by hand."""

import math

import numpy as np
import pytest

from harness.scoring import metrics
from harness.task.prompts import build_prompt, rotate, scene_hint


def test_bleu4_matches_hand_computation():
    # 1-gram 5/6 (the clipped), 2-gram 3/5, 3-gram 2/4, 4-gram 1/3, equal lengths (BP = 1)
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert metrics.bleu4(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(
        expected, abs=1e-6
    )


def test_bootstrap_interval():
    assert metrics.bootstrap_ci([1, 1, 1]) == [1.0, 1.0]
    assert metrics.bootstrap_ci([]) is None
    v = [1] * 60 + [0] * 40
    lo, hi = metrics.bootstrap_ci(v, seed=3)
    assert lo < 0.6 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.24 / 100), abs=0.03)
    assert metrics.bootstrap_ci(v, seed=3) == [lo, hi]  # seeded: the same interval every run


def test_paired_accuracy_needs_both_variants_right():
    recs = [
        {"minimal_pair_id": "p1", "correct": True},
        {"minimal_pair_id": "p1", "correct": True},
        {"minimal_pair_id": "p2", "correct": True},
        {"minimal_pair_id": "p2", "correct": False},
        {"minimal_pair_id": "p3", "correct": True},  # its partner is missing: not a pair
        {"minimal_pair_id": "", "correct": False},
    ]
    m = metrics.paired_accuracy(recs)
    assert (m["value"], m["n"]) == (0.5, 2)


def test_breakdown_by_layers():
    recs = [
        {"layers": ["speech", "event"], "correct": True},
        {"layers": ["event", "speech"], "correct": False},
        {"layers": ["speech"], "correct": True},
    ]
    assert metrics.breakdown(recs, "layers") == {
        "event+speech": {"value": 0.5, "n": 2},
        "speech": {"value": 1.0, "n": 1},
    }


def test_one_minus_wer_on_quoted_speech():
    # reference 6 words, hypothesis drops one "the": WER 1/6
    d = 'An instructor says "check the fuel and flaps" while an engine starts.'
    assert metrics.one_minus_wer(d, ["Check the fuel and the flaps."]) == pytest.approx(1 - 1 / 6)
    assert metrics.quoted_speech("no quotes here") == "no quotes here"
    assert metrics.quoted_speech("He says “hello there” and ‘bye’.") == "hello there bye"
    assert metrics.one_minus_wer("words " * 40, ["short reference"]) == 0.0  # floored
    assert metrics.one_minus_wer("anything", []) is None  # a scene without speech


def test_event_match_by_embeddings():
    m = metrics.EmbeddingEventMatcher()
    d = "We are in a school hallway. A school bell rings loudly. Then the teacher speaks."
    assert m.share(d, ["A school bell rings.", "A dog barks in the distance."]) == 0.5
    assert m.share(d, []) is None
    assert m.share("", ["A school bell rings."]) == 0.0


def test_bertscore_identical_and_empty():
    f1 = metrics.bertscore_f1(["a dog barks in the park", ""], ["a dog barks in the park", "a cat"])
    assert f1[0] == pytest.approx(1.0, abs=1e-5) and f1[1] == 0.0


def test_prompt_rotation_and_hint():
    opts, key = rotate(["w", "x", "y", "z"], "B", 1)
    assert opts == ["x", "y", "z", "w"] and key == "A"
    assert [rotate(["w", "x", "y", "z"], "B", r)[1] for r in range(4)] == ["B", "A", "D", "C"]
    assert scene_hint("airport gate") == "This audio is recorded in an airport gate.\n"
    p = build_prompt("{hint}{question}\n{options}", "Q?", ["a", "b"], "kitchen")
    assert p == "This audio is recorded in a kitchen.\nQ?\nA. a\nB. b"
    assert np.isclose(metrics.mean_with_ci([0, 1])["value"], 0.5)


def _picked_a(s: metrics.Scored) -> dict:
    for r in s.ok:
        r.metrics["picked_a"] = float(r.parsed == "A")
    return metrics.mean_with_ci([r.metrics["picked_a"] for r in s.ok], seed=s.context.seed)


def test_a_metric_registered_once_is_validated_computed_and_reported(casu_small, tmp_path, request):
    """A new metric is one `register_metric` call: the task YAML accepts it, evaluate computes it,
    the results document, the per-task table and lm-eval's results and sample lines report it."""
    import json

    import yaml
    from helpers import harness_run

    from harness.task.config import TaskConfigError, builtin_tasks_dir, load_task

    cfg = yaml.safe_load((builtin_tasks_dir() / "role_inference.yaml").read_text())
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    yaml_path = tasks / "role_inference_a.yaml"
    yaml_path.write_text(yaml.safe_dump(dict(cfg, task="role_inference_a", metrics=["accuracy", "picked_a"])))
    with pytest.raises(TaskConfigError, match=r"metrics: .*unknown metric\(s\) \['picked_a'\]"):
        load_task(yaml_path)

    metrics.register_metric(
        metrics.Metric(
            "picked_a",
            (metrics.MCQ,),
            _picked_a,
            higher_is_better=False,
            lmeval="picked_a",
            sample_key="picked_a",
            label="Picked A",
        )
    )
    request.addfinalizer(lambda: metrics.unregister_metric("picked_a"))
    assert load_task(yaml_path).metrics == ["accuracy", "picked_a"]
    out = tmp_path / "out"
    extra = ["--include_path", str(tasks), "--log_samples", "--cache", "off"]
    rc, stdout, stderr = harness_run(casu_small, out, *extra, tasks="role_inference_a")
    assert rc == 0, stderr
    run = out / "random"
    doc = json.loads(next(run.glob("casu_results_*.json")).read_text())
    log = next(run.glob("casu_samples_role_inference_a_*.jsonl"))
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    share = sum(r["parsed"] == "A" for r in recs) / len(recs)
    m = doc["results"]["role_inference_a"]["PEB"]
    assert len(recs) == m["n"] > 0 and m["picked_a"]["value"] == share and 0 < share < 1
    assert [r["picked_a"] for r in recs] == [float(r["parsed"] == "A") for r in recs]
    md = next(run.glob("results_*.md")).read_text().splitlines()

    def cells(line):
        return [c.strip() for c in line.strip().strip("|").split("|")]

    head = cells(next(line for line in md if line.startswith("| Task | Condition |")))
    row = cells(next(line for line in md if line.startswith("| role_inference_a | PEB |")))
    assert len(row) == len(head) and row[head.index("Picked A")] == f"{100 * share:.2f}"
    lm = json.loads(next(run.glob("results_*.json")).read_text())
    assert lm["results"]["role_inference_a"]["picked_a,none"] == share
    assert lm["higher_is_better"]["role_inference_a"] == {"acc": True, "family_acc": True, "picked_a": False}
    lines = [
        json.loads(line)
        for line in next(run.glob("samples_role_inference_a_*.jsonl")).read_text().splitlines()
    ]
    assert [line["picked_a"] for line in lines] == [float(r["parsed"] == "A") for r in recs]
    assert all("picked_a" in line["metrics"] for line in lines)


def test_registering_a_metric_twice_or_for_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="'accuracy' is already registered"):
        metrics.register_metric(metrics.Metric("accuracy", (metrics.MCQ,), _picked_a))
    with pytest.raises(ValueError, match=r"kinds \['open'\]"):
        metrics.register_metric(metrics.Metric("x", ("open",), _picked_a))
    assert "x" not in metrics.METRICS
