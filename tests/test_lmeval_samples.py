"""lm-eval's `samples_<task>_<date>.jsonl` lines as lm-eval's EvaluationTracker writes them."""

import json

from conftest import call_main

from harness.cli import main


def test_a_generation_requests_gen_kwargs_are_an_object(casu_small, tmp_path):
    argv = ["--model", "random", "--tasks", "scene_description", "--dataset", str(casu_small)]
    argv += ["--limit", "4", "--output_path", str(tmp_path), "--log_samples", "--quiet", "--no_probe"]
    rc, _, err = call_main(main, argv)
    assert rc == 0, err
    (path,) = tmp_path.glob("random/samples_scene_description_*.jsonl")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    (doc,) = [json.loads(p.read_text()) for p in tmp_path.glob("random/casu_results_*.json")]
    assert len(lines) == 4
    for line in lines:
        (req,) = line["arguments"].values()
        assert isinstance(req["arg_1"], dict)  # lm-eval: the (context, gen_kwargs) pair, kwargs an object
        assert req["arg_1"] == doc["generation"]["scene_description"]
        assert req["arg_0"].strip()
