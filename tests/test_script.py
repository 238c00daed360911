import json

import pytest
import yaml

from casu_dataset.script.schema import (
    SceneScript,
    ScriptError,
    load_script,
    parse_script,
)


def base(**over):
    d = {
        "id": "school_bell",
        "place": "school hallway",
        "speech_type": "conversation",
        "background": {"description": "children chatter in a corridor", "keywords": ["school", "children"]},
        "speakers": [
            {"id": "T", "role": "teacher", "gender": "female"},
            {"id": "S", "role": "student", "gender": "male", "age": "child"},
        ],
        "turns": [
            {"speaker": "T", "text": "It's time to go, everyone."},
            {"speaker": "S", "text": "Can we take our drawings home?"},
        ],
        "events": [
            {
                "id": "bell",
                "description": "an electric school bell rings",
                "keywords": ["bell"],
                "anchor": {"type": "after_turn", "turn": 0, "offset": 0.2},
            }
        ],
    }
    d.update(over)
    return d


def test_valid_script_round_trips_json_and_yaml(tmp_path):
    s = parse_script(base())
    assert SceneScript.model_validate(json.loads(s.dump_json())) == s
    assert SceneScript.model_validate(yaml.safe_load(s.dump_yaml())) == s
    p = tmp_path / "s.yaml"
    p.write_text(s.dump_yaml())
    assert load_script(p) == s
    p = tmp_path / "s.json"
    p.write_text(s.dump_json())
    assert load_script(p) == s


@pytest.mark.parametrize(
    "anchor",
    [
        {"type": "at", "time": 3.5},
        {"type": "start"},
        {"type": "during_turn", "turn": 1, "offset": 0.4},
        {"type": "after_turn", "turn": 1},
    ],
)
def test_every_anchor_kind_parses(anchor):
    d = base()
    d["events"][0]["anchor"] = anchor
    assert parse_script(d).events[0].anchor.type == anchor["type"]


def _err(d) -> str:
    with pytest.raises(ScriptError) as e:
        parse_script(d, "scenes/x.yaml")
    return str(e.value)


def test_unknown_speaker_is_named():
    d = base()
    d["turns"][1]["speaker"] = "Z"
    msg = _err(d)
    assert msg.startswith("scenes/x.yaml")
    assert "turns[1].speaker" in msg and "unknown speaker 'Z'" in msg


def test_anchor_to_missing_turn():
    d = base()
    d["events"][0]["anchor"] = {"type": "during_turn", "turn": 7}
    msg = _err(d)
    assert "events[0].anchor.turn" in msg and "turn 7 does not exist" in msg


def test_timeline_that_cannot_fit_30s():
    d = base()
    d["turns"] = [
        {"speaker": "T", "text": " ".join(["word"] * 60)},
        {"speaker": "S", "text": " ".join(["word"] * 30)},
    ]
    msg = _err(d)
    assert "cannot fit in 30 s" in msg and "turns" in msg


def test_empty_text():
    d = base()
    d["turns"][0]["text"] = "   "
    msg = _err(d)
    assert "turns.0.text" in msg and "turn text is empty" in msg


def test_speech_type_and_speaker_count_agree():
    d = base(speech_type="monologue")
    assert "a monologue has exactly 1 speaker" in _err(d)


def test_unknown_field_and_bad_yaml_name_the_file(tmp_path):
    d = base()
    d["turns"][0]["txt"] = "oops"
    assert "turns.0.txt" in _err(d)
    p = tmp_path / "bad.yaml"
    p.write_text("id: [unclosed")
    with pytest.raises(ScriptError, match="bad.yaml: not valid YAML"):
        load_script(p)
    with pytest.raises(ScriptError, match="missing.json: cannot read"):
        load_script(tmp_path / "missing.json")
