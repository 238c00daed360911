"""Every metric against values computed by hand."""
import math

import numpy as np
import pytest

from harness import metrics as M
from harness.prompts import build_prompt, rotate, scene_hint


def test_bleu4_matches_hand_computation():
    # 1-gram 5/6 (the clipped), 2-gram 3/5, 3-gram 2/4, 4-gram 1/3, equal lengths (BP = 1)
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert M.bleu4(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(expected, abs=1e-6)


def test_bootstrap_interval():
    assert M.bootstrap_ci([1, 1, 1]) == [1.0, 1.0]
    assert M.bootstrap_ci([]) is None
    v = [1] * 60 + [0] * 40
    lo, hi = M.bootstrap_ci(v, seed=3)
    assert lo < 0.6 < hi and hi - lo == pytest.approx(2 * 1.96 * math.sqrt(0.24 / 100), abs=0.03)
    assert M.bootstrap_ci(v, seed=3) == [lo, hi]  # seeded: the same interval every run


def test_paired_accuracy_needs_both_variants_right():
    recs = [{"minimal_pair_id": "p1", "correct": True}, {"minimal_pair_id": "p1", "correct": True},
            {"minimal_pair_id": "p2", "correct": True}, {"minimal_pair_id": "p2", "correct": False},
            {"minimal_pair_id": "p3", "correct": True},  # its partner is missing: not a pair
            {"minimal_pair_id": "", "correct": False}]
    m = M.paired_accuracy(recs)
    assert (m["value"], m["n"]) == (0.5, 2)


def test_breakdown_by_layers():
    recs = [{"layers": ["speech", "event"], "correct": True}, {"layers": ["event", "speech"], "correct": False},
            {"layers": ["speech"], "correct": True}]
    assert M.breakdown(recs, "layers") == {"event+speech": {"value": 0.5, "n": 2}, "speech": {"value": 1.0, "n": 1}}


def test_one_minus_wer_on_quoted_speech():
    # reference 6 words, hypothesis drops one "the": WER 1/6
    d = 'An instructor says "check the fuel and flaps" while an engine starts.'
    assert M.one_minus_wer(d, ["Check the fuel and the flaps."]) == pytest.approx(1 - 1 / 6)
    assert M.quoted_speech("no quotes here") == "no quotes here"
    assert M.quoted_speech('He says “hello there” and ‘bye’.') == "hello there bye"
    assert M.one_minus_wer("words " * 40, ["short reference"]) == 0.0  # floored
    assert M.one_minus_wer("anything", []) is None  # a scene without speech


def test_event_match_by_embeddings():
    m = M.EmbeddingEventMatcher()
    d = "We are in a school hallway. A school bell rings loudly. Then the teacher speaks."
    assert m.share(d, ["A school bell rings.", "A dog barks in the distance."]) == 0.5
    assert m.share(d, []) is None
    assert m.share("", ["A school bell rings."]) == 0.0


def test_bertscore_identical_and_empty():
    f1 = M.bertscore_f1(["a dog barks in the park", ""], ["a dog barks in the park", "a cat"])
    assert f1[0] == pytest.approx(1.0, abs=1e-5) and f1[1] == 0.0


def test_prompt_rotation_and_hint():
    opts, key = rotate(["w", "x", "y", "z"], "B", 1)
    assert opts == ["x", "y", "z", "w"] and key == "A"
    assert [rotate(["w", "x", "y", "z"], "B", r)[1] for r in range(4)] == ["B", "A", "D", "C"]
    assert scene_hint("airport gate") == "This audio is recorded in an airport gate.\n"
    p = build_prompt("{hint}{question}\n{options}", "Q?", ["a", "b"], "kitchen")
    assert p == "This audio is recorded in a kitchen.\nQ?\nA. a\nB. b"
    assert np.isclose(M.mean_with_ci([0, 1])["value"], 0.5)
