"""What `python -m harness` prints tells the truth about a run: per task the parsed and unparsed
answers and the failed samples, (PARTIAL) under --limit, Table 2 whenever layer conditions ran,
and one line when most answers could not be parsed (exit 0 as lm-eval, 7 with --strict)."""

from helpers import harness_run

from model_adapters.base import Adapter


class Mumble(Adapter):
    """Answers every question with words that name no option (nothing to parse)."""

    name = "mumble"
    uses_audio = False
    chat_template_use = "always"

    def generate(self, requests, settings):
        return ["hmm, hard to say" for _ in requests]


def _run(casu_small, tmp_path, model, *extra):
    return harness_run(casu_small, tmp_path / "out", "--limit", "8", *extra, model=model)


def test_unparsed_answers_are_said_in_one_line_and_fail_only_under_strict(casu_small, tmp_path):
    rc, out, err = _run(casu_small, tmp_path, "tests.test_console:Mumble", "--log_samples")
    assert rc == 0, err
    assert "| role_inference (PARTIAL) | full | 8 | 0.0% | 100.0% | 0 |" in out
    (warning,) = [line for line in err.splitlines() if "could not be parsed" in line]
    assert "role_inference: 100% of 8 answers" in warning
    (samples,) = (tmp_path / "out").glob("*/casu_samples_role_inference_*.jsonl")
    assert str(samples) in warning  # the answers are where the line says
    rc, out, err = _run(casu_small, tmp_path, "tests.test_console:Mumble", "--strict")
    assert rc == 7 and "--strict: role_inference: most answers unparsed" in err
    assert "--log_samples" in err  # no samples file this time: the line says how to get one


def test_a_model_that_parses_gets_no_warning_and_table_2_shows_with_conditions(casu_small, tmp_path):
    rc, out, err = _run(casu_small, tmp_path, "random", "--conditions", "PEB,P__", "--strict")
    assert rc == 0, err
    assert "could not be parsed" not in err
    assert "Table 2" in out and "| ✓ | × | × |" in out
    assert "| role_inference (PARTIAL) | P__ | 8 | 100.0% | 0.0% | 0 |" in out
    rc, out, err = _run(casu_small, tmp_path, "random")
    assert "Table 2" not in out  # the full mixture only
