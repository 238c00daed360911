"""The scored record: a plain dataclass whose written line (to_dict) has the keys that follow from
what happened to its request, in the written order; metrics add values to `metrics`, never fields."""

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
    assert list(r.to_dict()) == BASE_KEYS + ["response", "parsed", "method", "correct"]
    ll = ScoredRecord(**dict(BASE, mode="loglikelihood"), scores=[0.1, 0.9], parsed="B", method="ll")
    assert list(ll.to_dict())[-4:] == ["scores", "parsed", "method", "correct"] and ll.correct is None
    failed = ScoredRecord(**BASE, error="boom", correct=False, method="error")
    assert list(failed.to_dict())[-4:] == ["error", "correct", "parsed", "method"]
    assert "response" not in failed.to_dict() and failed.failed and not failed.right
    fam = ScoredRecord(**BASE, system="Be brief.", family_id="f1", variant="a", response="A", parsed="A")
    assert list(fam.to_dict())[14:20] == [
        "system",
        "family_id",
        "variant",
        "family_shape",
        "slot_kind",
        "response",
    ]
    text = ScoredRecord(
        **dict(BASE, options=[], answer=""), multiple_choice=False, response="a dog", reference="a dog barks",
        event_descriptions=["dog barking"], turns=["hello"],
    )  # fmt: skip
    assert list(text.to_dict())[-4:] == ["response", "reference", "event_descriptions", "turns"]
    assert "correct" not in text.to_dict() and "error" not in text.to_dict()


def test_metrics_add_per_sample_values_after_the_fields_and_a_record_is_no_dict():
    text = ScoredRecord(**BASE, multiple_choice=False, response="x", reference="y", turns=[])
    text.metrics["bertscore_f1"] = 0.5
    text.metrics["event_match"] = None  # a value that could not be computed is written as null
    text.response = "x!"
    line = json.loads(json.dumps(text.to_dict()))
    assert list(line)[-2:] == ["bertscore_f1", "event_match"] and line["response"] == "x!"
    assert line["event_match"] is None and text.written_keys() == list(line)
    with pytest.raises(TypeError):
        text["response"]  # type: ignore[index]  # no dict behaviour: fields by name, values in metrics
    with pytest.raises(TypeError):
        dict(text)  # type: ignore[call-overload]


def test_a_written_line_reads_back_as_the_same_record():
    fam = ScoredRecord(
        **BASE, family_id="f1", variant="a", response="A", parsed="A", method="letter", correct=False
    )
    fam.metrics["doc_options"] = ["x", "y"]
    back = ScoredRecord.from_row(json.loads(json.dumps(fam.to_dict())))
    assert back == fam and back.to_dict() == fam.to_dict()
    peer = ScoredRecord.from_row({"id": "q2", "task": "t", "response": "a", "reference": "b"})
    assert not peer.multiple_choice and peer.rotation == 0 and list(peer.to_dict())[-4:] == [
        "response", "reference", "event_descriptions", "turns",
    ]  # fmt: skip
