"""The scored record: typed fields, read as the mapping each sample-log line is written as; which
keys a record has follows from what happened to its request, in the written order."""

import json

import pytest

from harness.scoring.records import ScoredRecord

BASE = dict(
    id="q1", task="role_inference", condition="PEB", rotation=0, scene_id="s1", place="kitchen",
    speech_type="dialogue", layers=["P", "E", "B"], minimal_pair_id="", mode="generate",
    question="Who?", prompt="Who?\nA. x\nB. y", options=["x", "y"], answer="B",
)  # fmt: skip
BASE_KEYS = list(BASE)


def test_keys_follow_what_happened_in_the_written_order():
    r = ScoredRecord(**BASE, response="B", parsed="B", method="letter", correct=True)
    assert list(r) == BASE_KEYS + ["response", "parsed", "method", "correct"]
    ll = ScoredRecord(**dict(BASE, mode="loglikelihood"), scores=[0.1, 0.9], parsed="B", method="ll")
    assert list(ll)[-4:] == ["scores", "parsed", "method", "correct"] and ll["correct"] is None
    failed = ScoredRecord(**BASE, error="boom", correct=False, method="error")
    assert list(failed)[-4:] == ["error", "correct", "parsed", "method"] and "response" not in failed
    fam = ScoredRecord(**BASE, system="Be brief.", family_id="f1", variant="a", response="A", parsed="A")
    assert list(fam)[14:20] == ["system", "family_id", "variant", "family_shape", "slot_kind", "response"]
    text = ScoredRecord(
        **dict(BASE, options=[], answer=""), multiple_choice=False, response="a dog", reference="a dog barks",
        event_descriptions=["dog barking"], turns=["hello"],
    )  # fmt: skip
    assert list(text)[-4:] == ["response", "reference", "event_descriptions", "turns"]
    assert "correct" not in text and "error" not in text


def test_metrics_add_per_sample_values_after_the_fields_and_writers_see_a_dict():
    text = ScoredRecord(**BASE, multiple_choice=False, response="x", reference="y", turns=[])
    text["bertscore_f1"] = 0.5
    text["event_match"] = None  # a value that could not be computed is written as null
    text["response"] = "x!"  # a field set by name stays the field
    assert list(text)[-2:] == ["bertscore_f1", "event_match"] and text.response == "x!"
    line = json.loads(json.dumps(dict(text)))
    assert line == text.to_dict() and line["event_match"] is None and text == line
    assert dict(text, correct=True)["correct"] is True  # dict(rec, ...) as the family metrics do
    with pytest.raises(KeyError):
        text["scores"]  # not a key of a description
    with pytest.raises(KeyError):
        del text["response"]
    del text["event_match"]
    assert "event_match" not in text
