"""The rules every bad-input corpus is judged by (tests/bad_input_corpus.py): the classifier
fails each kind of bad handling, and the exit codes the corpora expect are the ones each CLI's
--help documents."""

from __future__ import annotations

import pytest
from bad_input_corpus import OK, SKIP, E, Outcome, casu, classify, harness


@pytest.mark.parametrize(
    "outcome, expect, verdict",
    [
        (
            Outcome(None, "", "Traceback (most recent call last):\n  ...\nKeyError: 'x'"),
            (E, 2, "--dataset"),
            "TRACEBACK",
        ),
        (Outcome(2, "Traceback (most recent call last):\nValueError"), (E, 2, "--dataset"), "TRACEBACK"),
        (Outcome(0, "evaluated 3 requests"), (E, 2, "--dataset"), "SILENT"),
        (Outcome(0, "HANG: still running after 60 s"), (E, 2, "--dataset"), "SILENT"),
        (Outcome(1, "--dataset: no such folder"), (E, 2, "--dataset"), "UNNAMED"),
        (Outcome(2, "error: no such folder"), (E, 2, "--dataset"), "UNNAMED"),
        (Outcome(2, "--dataset: no such folder"), (E, 2, "--dataset"), "named"),
        (Outcome(2, "--limit: must be > 0"), (SKIP, "line 2"), "SILENT"),
        (Outcome(0, "skipped 1 line(s)"), (SKIP, "line 2"), "UNNAMED"),
        (Outcome(0, "skipped 1 line(s): line 2: time"), (SKIP, "line 2"), "skip"),
        (Outcome(0, ""), (OK,), "ok"),
    ],
)
def test_the_classifier_fails_each_kind_of_bad_handling(outcome, expect, verdict):
    """A corpus is only as strict as `classify`: a traceback, an error that exits 0, a wrong
    exit code and a message missing the named field each fail a case."""
    assert classify(outcome, expect)[0] == verdict


def test_exit_codes_are_documented_in_help():
    for cli, argv in ((harness, ["--help"]), (casu, ["--help"])):
        o = cli(*argv)
        assert o.code == 0 and "exit codes" in o.out, o.out[-500:]
    assert "2 " in harness("--help").out and "3 " in harness("--help").out
