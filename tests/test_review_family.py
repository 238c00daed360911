"""Review of contrast families: family decisions, their application to a build's rows (a family
is all four variants or nothing), the family API over HTTP and the family view in Chromium.

The v2 dataset is the fixture library compiled for real (two families, 8 variants, questions
with shared options and per-variant keys), turned into rows by the build's own row writer
with short synthetic audio instead of a render, so it takes well under a second."""

from __future__ import annotations

import copy
import json
import os
import threading
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest
from conftest import chromium, fixture_family_rows, wait_for, write_dataset

from casu_dataset.dataset.build import CONFIGS
from casu_dataset.review.apply import apply_review
from casu_dataset.review.decisions import (
    DecisionError,
    DecisionLog,
    decisions_path,
    load,
    validate,
)
from casu_dataset.review.server import serve


@pytest.fixture(scope="module")
def v2_rows() -> dict[str, list[dict]]:
    return fixture_family_rows()


def _review(tmp_path, *recs):
    log = DecisionLog(tmp_path / "d.jsonl")
    for r in recs:
        log.append({"reviewer": "ann", **r})
    return log.review()


# -- decisions --------------------------------------------------------------------------------

OPTS = ["Home time", "An emergency", "A storm", "Transport arrived"]


@pytest.mark.parametrize(
    "rec, msg",
    [
        ({"kind": "family", "item": "fx_class_lineup", "action": "edit"}, "only questions can be edited"),
        ({"kind": "family_question", "item": "fx_class_lineup", "action": "accept"}, "FAMILY/TASK"),
        ({"kind": "family_question", "item": "fx_class_lineup/nope", "action": "reject"}, "FAMILY/TASK"),
        (
            {"kind": "family_question", "item": "fx_class_lineup/contextual_reasoning", "action": "edit"},
            "edit.question and/or",
        ),
        (
            {
                "kind": "family_question",
                "item": "fx_class_lineup/contextual_reasoning",
                "action": "edit",
                "edit": {"question": "  "},
            },
            "edit.question is missing or empty",
        ),
        (
            {
                "kind": "family_question",
                "item": "fx_class_lineup/contextual_reasoning",
                "action": "edit",
                "edit": {"options": OPTS[:3]},
            },
            "4 non-empty",
        ),
        (
            {
                "kind": "family_question",
                "item": "fx_class_lineup/contextual_reasoning",
                "action": "edit",
                "edit": {"options": [*OPTS[:3], "a storm"]},
            },
            "distinct",
        ),
        (
            {
                "kind": "family_question",
                "item": "fx_class_lineup/contextual_reasoning",
                "action": "edit",
                "edit": {"question": "Why?", "options": OPTS, "answer": "B"},
            },
            "edit.answer: a family question's key is per variant",
        ),
        (
            {
                "kind": "family_question",
                "item": "fx_class_lineup/contextual_reasoning",
                "action": "edit",
                "edit": {"question": "Is it home time or not?", "options": OPTS},
            },
            r"edit.options\[0\] \(A\)",
        ),
    ],
)
def test_family_decisions_are_validated_with_named_errors(rec, msg):
    with pytest.raises(DecisionError, match=msg):
        validate({"reviewer": "ann", **rec})


def test_family_decisions_load_and_count(tmp_path):
    rv = _review(
        tmp_path,
        {"kind": "family", "item": "f", "action": "accept"},
        {"kind": "family_question", "item": "f/role_inference", "action": "edit", "edit": {"options": OPTS}},
        {"kind": "scene", "item": "f.bell", "action": "reject"},
    )
    assert rv.status("family", "f") == "accept" and rv.final[("family_question", "f/role_inference")][
        "edit"
    ] == {"options": OPTS}
    assert rv.counts() == {"reviewed": 3, "accepted": 1, "edited": 1, "rejected": 1}


# -- apply_review ------------------------------------------------------------------------------


def _ids(rows):
    return {c: sorted(r.get("id") or r["scene_id"] for r in rows[c]) for c in CONFIGS}


def test_a_rejected_variant_removes_its_whole_family_from_every_config(v2_rows, tmp_path):
    rows = copy.deepcopy(v2_rows)
    before = _ids(rows)
    # the slot family has rows in 4 configs (scenes, 2 question tasks, scene_description)
    assert {c for c in CONFIGS if any(r["family_id"] == "fx_class_lineup" for r in rows[c])} == {
        "scenes",
        "contextual_reasoning",
        "counterfactual_reasoning",
        "scene_description",
    }
    res = apply_review(
        rows,
        _review(
            tmp_path,
            {"kind": "scene", "item": "fx_class_lineup.horn", "action": "reject"},
            {"kind": "scene", "item": "nope.bell", "action": "reject"},
            {"kind": "family", "item": "nope", "action": "reject"},
        ),
    )
    for c in CONFIGS:
        assert not [r for r in rows[c] if r["family_id"] == "fx_class_lineup"], c
        assert sorted(r.get("id") or r["scene_id"] for r in rows[c]) == [
            i for i in before[c] if not i.startswith("fx_class_lineup.")
        ], c
    assert {r["scene_id"] for r in rows["scenes"]} == {
        f"fx_go_or_stay.{v}" for v in ("go.alarm", "go.phone", "stay.alarm", "stay.phone")
    }
    assert res["applied"] == {
        "questions_rejected": 0,
        "questions_edited": 0,
        "scenes_rejected": 1,
        "families_rejected": 1,
        "family_questions_rejected": 0,
        "family_questions_edited": 0,
    }
    # decisions on items the build does not have are listed, never counted as reviewed
    assert (
        res["rejected"] == 1 and res["refused"] == [] and res["unknown"] == ["family nope", "scene nope.bell"]
    )


def test_a_rejected_family_goes_whole_and_v1_rows_keep_their_behaviour(v2_rows, tmp_path):
    rows = copy.deepcopy(v2_rows)
    v1 = dict(rows["contextual_reasoning"][0], id="old/q1", scene_id="old", family_id=None, variant=None)
    rows["contextual_reasoning"] += [v1, dict(v1, id="old/q2"), dict(v1, id="gone/q1", scene_id="gone")]
    rows["scenes"].append(dict(rows["scenes"][0], scene_id="gone", family_id=None, variant=None))
    res = apply_review(
        rows,
        _review(
            tmp_path,
            {"kind": "family", "item": "fx_class_lineup", "action": "reject"},
            {
                "kind": "question",
                "item": "old/q1",
                "action": "edit",
                "edit": {"question": "New?", "options": OPTS, "answer": "D"},
            },
            {"kind": "question", "item": "old/q2", "action": "reject"},
            {"kind": "scene", "item": "gone", "action": "reject"},
        ),
    )
    assert {r["family_id"] for c in CONFIGS for r in rows[c]} == {"fx_go_or_stay", None}
    v1_left = [
        (r["id"], r["question"], r["answer"]) for r in rows["contextual_reasoning"] if not r["family_id"]
    ]
    assert v1_left == [("old/q1", "New?", "D")] and "gone" not in {r["scene_id"] for r in rows["scenes"]}
    assert res["applied"] == {
        "questions_rejected": 1,
        "questions_edited": 1,
        "scenes_rejected": 1,
        "families_rejected": 1,
        "family_questions_rejected": 0,
        "family_questions_edited": 0,
    }


def test_a_family_question_edit_changes_all_four_variants_and_keeps_their_keys(v2_rows, tmp_path):
    rows = copy.deepcopy(v2_rows)
    item = "fx_go_or_stay/contextual_reasoning"
    old = {r["id"]: r for r in rows["contextual_reasoning"] if r["family_id"] == "fx_go_or_stay"}
    assert sorted(r["answer"] for r in old.values()) == list("ABCD")
    new_opts = [f"{o} (reworded)" for o in next(iter(old.values()))["options"]]
    res = apply_review(
        rows,
        _review(
            tmp_path,
            {
                "kind": "family_question",
                "item": item,
                "action": "edit",
                "edit": {"question": "What does the manager tell them?", "options": new_opts},
            },
            {
                "kind": "family_question",
                "item": "fx_class_lineup/counterfactual_reasoning",
                "action": "reject",
            },
        ),
    )
    now = {r["id"]: r for r in rows["contextual_reasoning"] if r["family_id"] == "fx_go_or_stay"}
    assert sorted(now) == sorted(old)
    for qid, r in now.items():
        assert r["question"] == "What does the manager tell them?" and r["options"] == new_opts
        assert r["answer"] == old[qid]["answer"] and r["rationale"] == old[qid]["rationale"]
    assert [r for r in rows["counterfactual_reasoning"] if r["family_id"] == "fx_class_lineup"] == []
    assert len([r for r in rows["contextual_reasoning"] if r["family_id"] == "fx_class_lineup"]) == 4
    assert len(rows["scenes"]) == 8  # the scenes stay: only that task's question went
    assert res["applied"]["family_questions_edited"] == 1 and res["applied"]["family_questions_rejected"] == 1
    assert res["applied"]["families_rejected"] == 0


def test_a_per_variant_edit_of_a_family_question_is_refused_not_applied(v2_rows, tmp_path):
    rows = copy.deepcopy(v2_rows)
    qid = "fx_class_lineup.bell/contextual_reasoning"
    res = apply_review(
        rows,
        _review(
            tmp_path,
            {
                "kind": "question",
                "item": qid,
                "action": "edit",
                "edit": {"question": "Changed?", "options": OPTS, "answer": "A"},
            },
        ),
    )
    assert {r["question"] for r in rows["contextual_reasoning"] if r["family_id"] == "fx_class_lineup"} == {
        "Why does the teacher tell the class to line up by the door?"
    }
    assert (
        len(res["refused"]) == 1
        and "family_question" in res["refused"][0]
        and "fx_class_lineup/" in res["refused"][0]
    )
    assert res["applied"]["questions_edited"] == 0


def test_a_per_variant_reject_of_a_family_question_drops_it_from_all_four(v2_rows, tmp_path):
    rows = copy.deepcopy(v2_rows)
    res = apply_review(
        rows,
        _review(
            tmp_path,
            {"kind": "question", "item": "fx_go_or_stay.go.alarm/contextual_reasoning", "action": "reject"},
        ),
    )
    assert not [r for r in rows["contextual_reasoning"] if r["family_id"] == "fx_go_or_stay"]
    assert len(rows["scenes"]) == 8 and res["refused"] == []
    assert res["applied"]["family_questions_rejected"] == 1 and res["applied"]["questions_rejected"] == 0


# -- server -----------------------------------------------------------------------------------


@pytest.fixture
def served_v2(v2_rows, tmp_path):
    ds = write_dataset(v2_rows, tmp_path / "ds")
    srv, data = serve(ds, "127.0.0.1", 0, "tester")  # port 0: the OS picks
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield ds, f"http://127.0.0.1:{srv.server_address[1]}/", data
    srv.shutdown()
    srv.server_close()


def _get(url):
    return json.loads(urllib.request.urlopen(url).read())


def _post(url, body):
    import re  # the per-session token the page carries; the server refuses writes without it

    token = re.search(
        r'name="casu-token" content="([^"]+)"', urllib.request.urlopen(url).read().decode()
    ).group(1)
    req = urllib.request.Request(
        url + "api/decision",
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-CASU-Token": token},
    )
    try:
        return 200, json.loads(urllib.request.urlopen(req).read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_family_api_over_http(served_v2):
    ds, url, _ = served_v2
    state = _get(url + "api/state")
    assert [f["family_id"] for f in state["families"]] == ["fx_class_lineup", "fx_go_or_stay"]
    crossed = _get(url + "api/family/fx_go_or_stay")
    assert crossed["shape"] == "crossed" and [v["variant"] for v in crossed["variants"]] == [
        "go.alarm",
        "go.phone",
        "stay.alarm",
        "stay.phone",
    ]
    assert [(s["version"], s["variants"]) for s in crossed["speech"]] == [
        ("go", ["go.alarm", "go.phone"]),
        ("stay", ["stay.alarm", "stay.phone"]),
    ]
    (q,) = crossed["questions"]
    assert q["item"] == "fx_go_or_stay/contextual_reasoning" and sorted(q["keys"].values()) == list("ABCD")
    rows = {r["scene_id"]: r for r in pq.read_table(ds / "contextual_reasoning").to_pylist()}
    assert all(rows[f"fx_go_or_stay.{v}"]["answer"] == k for v, k in q["keys"].items())
    assert urllib.request.urlopen(url + "timeline/fx_go_or_stay.stay.phone.png").read()[:4] == b"\x89PNG"
    assert urllib.request.urlopen(url + "audio/fx_go_or_stay.go.alarm/audio.flac").read()[:4] == b"fLaC"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url + "api/family/nope")
    assert err.value.code == 404

    # decisions: the variant, the family question (partial edit completed from the original)
    assert _post(url, {"kind": "scene", "item": "fx_go_or_stay.stay.phone", "action": "reject"})[0] == 200
    code, res = _post(
        url,
        {
            "kind": "family_question",
            "item": q["item"],
            "action": "edit",
            "edit": {"question": "What does the manager decide?"},
        },
    )
    assert code == 200 and res["saved"]["edit"] == {
        "question": "What does the manager decide?",
        "options": q["options"],
    }
    code, res = _post(
        url,
        {
            "kind": "question",
            "item": "fx_go_or_stay.go.alarm/contextual_reasoning",
            "action": "edit",
            "edit": {"question": "X?", "options": OPTS, "answer": "A"},
        },
    )
    assert code == 400 and "kind 'family_question', item 'fx_go_or_stay/contextual_reasoning'" in res["error"]
    code, res = _post(
        url, {"kind": "family_question", "item": "fx_go_or_stay/role_inference", "action": "reject"}
    )
    assert code == 400 and "not in this dataset" in res["error"]
    code, res = _post(
        url,
        {
            "kind": "family_question",
            "item": q["item"],
            "action": "edit",
            "edit": {"options": [q["options"][0], *OPTS[1:]], "question": q["options"][0] + "?"},
        },
    )
    assert code == 400 and "appears in the question" in res["error"]
    # swapping two options' texts would swap two variants' keys: refused by name
    o = q["options"]
    code, res = _post(
        url,
        {
            "kind": "family_question",
            "item": q["item"],
            "action": "edit",
            "edit": {"options": [o[1], o[0], *o[2:]]},
        },
    )
    assert code == 400 and "edit.options[0] (A)" in res["error"] and "original option B" in res["error"]
    fam = _get(url + "api/family/fx_go_or_stay")
    assert fam["questions"][0]["question"] == "What does the manager decide?"
    assert fam["questions"][0]["status"] == "edit" and fam["variants"][3]["status"] == "reject"
    state = _get(url + "api/state")
    assert state["families"][1]["variants"][3]["status"] == "reject"
    assert [d["kind"] for d in map(json.loads, decisions_path(ds).read_text().splitlines())] == [
        "scene",
        "family_question",
    ]  # refused decisions never reach the file
    # the decisions file, applied to the rows, takes the family out
    rows = {c: pq.read_table(ds / c).to_pylist() for c in CONFIGS}
    res = apply_review(rows, load(decisions_path(ds)))
    assert res["applied"]["families_rejected"] == 1 and not any(
        r["family_id"] == "fx_go_or_stay" for r in rows["scenes"]
    )


def test_family_view_in_chromium_four_players_and_keyboard_decisions(served_v2, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ds, url, _ = served_v2
    drv = chromium()
    try:
        drv.get(url)
        wait_for(lambda: drv.execute_script("return typeof fam !== 'undefined' && fam && fam.family_id"))
        drv.execute_script("openFamily('fx_class_lineup')")
        wait_for(
            lambda: (
                drv.execute_script("return fam.family_id") == "fx_class_lineup"
                and len(drv.find_elements(By.CSS_SELECTOR, "audio.mix")) == 4
            )
        )
        srcs = [a.get_attribute("src") for a in drv.find_elements(By.CSS_SELECTOR, "audio.mix")]
        assert [s.rsplit("/", 2)[1] for s in srcs] == [
            f"fx_class_lineup.{v}" for v in ("bell", "horn", "siren", "thunder")
        ]
        assert len(drv.find_elements(By.CSS_SELECTOR, "img.timeline")) == 4
        assert "line up by the door" in drv.find_element(By.ID, "main").text
        body = drv.find_element(By.TAG_NAME, "body")
        drv.find_element(By.ID, "reviewer").clear()
        drv.find_element(By.ID, "reviewer").send_keys("ann")
        drv.execute_script("document.activeElement.blur()")  # keys go to the page, not the name box
        body.send_keys("3")  # plays variant 3's mixture
        wait_for(lambda: drv.execute_script("return document.getElementById('mix-2').currentTime > 0"))
        # reject variant 2 (item 2) with one key, then edit the first family question (item 5)
        drv.execute_script("setFocus(2)")
        body.send_keys("r")
        wait_for(lambda: drv.execute_script("return focus") == 3)
        drv.execute_script("setFocus(5)")
        body.send_keys("e")
        box = wait_for(lambda: drv.find_elements(By.ID, "eq-5"))[0]
        assert not drv.find_elements(By.ID, "ek-5")  # no key to edit: keys are per variant
        box.clear()
        box.send_keys("Why are the pupils told to line up?")
        box.send_keys(Keys.CONTROL, Keys.ENTER)
        wait_for(lambda: drv.execute_script("return items[5].status") == "edit")
        assert "Why are the pupils told to line up?" in drv.find_element(By.ID, "item-5").text
        assert drv.execute_script("return items[2].status") == "reject"
        assert "variant rejected" in drv.find_element(By.ID, "list").text
        assert "Left out of the build: a variant is rejected" in drv.find_element(By.ID, "item-0").text
        drv.execute_script("document.getElementById('main').scrollTo(0, 0)")
        wait_for(
            lambda: drv.execute_script(
                "return [...document.querySelectorAll('img.timeline')].every(i => i.complete)"
            )
        )
        drv.save_screenshot(str(os.environ.get("CASU_SHOT_DIR", tmp_path)) + "/review_family.png")
    finally:
        drv.quit()
    rv = load(decisions_path(ds))
    assert rv.status("scene", "fx_class_lineup.horn") == "reject" and {
        d["reviewer"] for d in rv.final.values()
    } == {"ann"}
    assert (
        rv.final[("family_question", "fx_class_lineup/contextual_reasoning")]["edit"]["question"]
        == "Why are the pupils told to line up?"
    )


# The longest place in the scenario library: in a menu it is wider than the 300 px side bar.
LONG_PLACE = "small boat at sea with an underwater microphone over the side"
# A timeline PNG is 1000 px wide with 7-pt labels at 100 dpi (9.7 px). Shown at 800 px or more
# its labels are at least 7.8 px tall, about the smallest a reader can make out; squeezed into a
# variant's card at 1280 px they were 206 px wide (2 px labels).
MIN_TIMELINE_PX = 800

GEOMETRY = """
const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
const main = document.getElementById('main'), side = document.getElementById('side');
return {
  width: innerWidth,
  side: box(side),
  menus: ['reviewer', 'fstatus', 'ftask', 'fplace', 'counts'].map(i => box(document.getElementById(i))),
  title: box(document.querySelector('#scene h2')),
  timelines: [...document.querySelectorAll('#timeline, img.timeline')].map(i => [...box(i), i.naturalWidth]),
  overflow: {page: document.documentElement.scrollWidth, side: side.scrollWidth - side.clientWidth,
             main: main.scrollWidth - main.clientWidth},
  past_right: [...document.querySelectorAll('body *')].filter(e => box(e)[2] > innerWidth + 0.5)
    .map(e => e.tagName + '#' + e.id).slice(0, 5),
};
"""


def _intersect(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def assert_readable(g: dict, timelines: int) -> None:
    """GEOMETRY's measurements at 1280 px: menus clear of the title and inside the side bar,
    `timelines` legible pictures, nothing past the window's right edge."""
    assert g["width"] == 1280, g
    assert not [m for m in g["menus"] if _intersect(m, g["title"])], g
    assert all(m[2] <= g["side"][2] for m in g["menus"]), g  # inside the side bar
    assert len(g["timelines"]) == timelines, g
    for left, _, right, _, natural in g["timelines"]:
        assert natural == 1000 and right - left >= MIN_TIMELINE_PX, g
    assert g["overflow"] == {"page": 1280, "side": 0, "main": 0} and not g["past_right"], g


def test_family_view_is_readable_in_a_1280_px_window(v2_rows, tmp_path):
    """At 1280x900 the filter menus stay in the side bar, clear of the family title, and each
    variant's timeline is drawn at a legible width; nothing spills past the window's right edge."""
    from selenium.webdriver.common.by import By

    rows = copy.deepcopy(v2_rows)
    for r in rows["scenes"]:
        r["place"] = LONG_PLACE
    ds = write_dataset(rows, tmp_path / "ds")
    srv, _ = serve(ds, "127.0.0.1", 0, "tester")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    drv = chromium()
    try:
        drv.set_window_size(1280, 900)
        drv.get(f"http://127.0.0.1:{srv.server_address[1]}/")
        wait_for(lambda: drv.execute_script("return typeof fam !== 'undefined' && fam && fam.family_id"))
        loaded = "return [...document.querySelectorAll('img.timeline')].every(i => i.naturalWidth)"
        wait_for(lambda: drv.execute_script(loaded))
        assert LONG_PLACE in drv.find_element(By.ID, "fplace").get_attribute("innerHTML")
        g = drv.execute_script(GEOMETRY)
        drv.save_screenshot(str(tmp_path / "review_family_1280.png"))  # tmp only: look at it when it fails
        assert_readable(g, 4)
        # the focus box is the focused item's, also past the speech box between variants and questions
        drv.execute_script("setFocus(5)")
        assert drv.execute_script("return document.querySelector('.item.focus').id") == "item-5"
    finally:
        drv.quit()
        srv.shutdown()
        srv.server_close()
