"""Human review: the decisions file, the build applying it, and the page in real headless Chromium."""

import json
import os
import re
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import build_small_v1, chromium, wait_for

from casu_dataset.review.decisions import DecisionLog, decisions_path, load
from casu_dataset.review.server import serve

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_corrupt_lines_are_reported_by_number_and_the_rest_kept(tmp_path):
    f = tmp_path / "d.jsonl"
    log = DecisionLog(f)
    log.append({"reviewer": "ann", "kind": "question", "item": "s/q1", "action": "accept"})
    with open(f, "a") as fh:
        fh.write('{"reviewer": "ann", "kind": "question", "item": "s/q2", "act\n')  # cut off mid-write
        fh.write('{"reviewer": "ann", "kind": "question", "item": "s/q3", "action": "maybe"}\n')
    log.append({"reviewer": "ann", "kind": "scene", "item": "s", "action": "reject", "comment": "too loud"})
    rv = load(f)
    assert [n for n, _ in rv.bad_lines] == [2, 3]
    assert (
        "line 2" in rv.bad_lines[0][1]
        and "action 'maybe'" in rv.bad_lines[1][1]
        and str(f) in rv.bad_lines[0][1]
    )
    assert rv.status("question", "s/q1") == "accept" and rv.status("scene", "s") == "reject"
    assert rv.counts() == {"reviewed": 2, "accepted": 1, "edited": 0, "rejected": 1}


def test_two_reviewers_keep_both_and_the_newest_wins(tmp_path):
    log = DecisionLog(tmp_path / "d.jsonl")
    log.append(
        {
            "reviewer": "ann",
            "kind": "question",
            "item": "s/q1",
            "action": "accept",
            "time": "2026-12-01T10:00:00+00:00",
        }
    )
    log.append(
        {
            "reviewer": "bob",
            "kind": "question",
            "item": "s/q1",
            "action": "reject",
            "time": "2026-12-01T11:00:00+00:00",
        }
    )
    log.append({"reviewer": "ann", "kind": "question", "item": "s/q2", "action": "accept"})
    log.append({"reviewer": "bob", "kind": "question", "item": "s/q2", "action": "accept"})
    rv = log.review()
    assert len(rv.history[("question", "s/q1")]) == 2 and rv.status("question", "s/q1") == "reject"
    assert [(c["item"], c["winner"]) for c in rv.conflicts] == [("s/q1", "bob")]  # q2: they agree


def test_bad_decisions_name_the_field(tmp_path):
    from casu_dataset.review.decisions import DecisionError

    log = DecisionLog(tmp_path / "d.jsonl")
    for rec, msg in [
        ({"kind": "question", "item": "x", "action": "accept"}, "reviewer"),
        ({"reviewer": "a", "kind": "scene", "item": "x", "action": "edit"}, "only questions"),
        (
            {
                "reviewer": "a",
                "kind": "question",
                "item": "x",
                "action": "edit",
                "edit": {"question": "q", "options": ["a", "b", "c"], "answer": "A"},
            },
            "edit.options",
        ),
        (
            {
                "reviewer": "a",
                "kind": "question",
                "item": "x",
                "action": "edit",
                "edit": {"question": "q", "options": list("abcd"), "answer": "E"},
            },
            "edit.answer",
        ),
    ]:
        with pytest.raises(DecisionError, match=msg):
            log.append(rec)
    assert not (tmp_path / "d.jsonl").exists()


@pytest.fixture
def served(casu_small_v1, tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(casu_small_v1, ds)
    srv, data = serve(ds, "127.0.0.1", 0, "tester")  # port 0: the OS picks, server_address says which
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield ds, f"http://127.0.0.1:{srv.server_address[1]}/", data
    srv.shutdown()
    srv.server_close()


def test_server_rejects_unknown_items_with_a_clear_error(served):
    ds, url, _ = served
    token = re.search(
        r'name="casu-token" content="([^"]+)"', urllib.request.urlopen(url).read().decode()
    ).group(1)
    req = urllib.request.Request(
        url + "api/decision",
        method="POST",
        headers={"Content-Type": "application/json", "X-CASU-Token": token},
        data=json.dumps({"kind": "question", "item": "nope/q", "action": "accept"}).encode(),
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req)
    assert err.value.code == 400 and "nope/q" in json.loads(err.value.read())["error"]
    assert urllib.request.urlopen(url + "timeline/" + "school_dismissal.png").read()[:4] == b"\x89PNG"


def test_review_page_end_to_end_in_chromium(served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    ds, url, data = served
    drv = chromium()
    try:
        drv.get(url)
        try:
            wait_for(lambda: drv.execute_script("return cur"))
            drv.execute_script("openScene('school_dismissal')")  # 4 questions (pair variants have 1)
            wait_for(
                lambda: (
                    drv.execute_script("return cur") == "school_dismissal"
                    and drv.find_elements(By.ID, "item-3")
                )
            )
        except AssertionError:
            state = drv.execute_script("return [typeof S, cur, items.length, S && S.scenes.length]")
            raise AssertionError(f"page did not load: {drv.get_log('browser')} {state}") from None
        scene = drv.execute_script("return cur")
        qids = drv.execute_script("return items.slice(1).map(i => i.item)")
        # the mixture plays in the browser (FLAC served from the parquet)
        drv.execute_script("document.getElementById('mix').play()")
        wait_for(
            lambda: drv.execute_script(
                "const m = document.getElementById('mix'); return !m.paused && m.currentTime > 0"
            )
        )
        drv.find_element(By.CSS_SELECTOR, "#reviewer").clear()
        drv.find_element(By.CSS_SELECTOR, "#reviewer").send_keys("ann")
        drv.execute_script("setFocus(1)")
        drv.find_element(By.CSS_SELECTOR, "body").click()
        # accept question 1 with the mouse, reject question 2 with one key, edit question 3
        drv.find_element(By.CSS_SELECTOR, 'button[data-i="1"][data-a="accept"]').click()
        wait_for(lambda: drv.execute_script("return focus") == 2)
        drv.find_element(By.TAG_NAME, "body").send_keys("r")
        wait_for(lambda: drv.execute_script("return focus") == 3)
        drv.find_element(By.TAG_NAME, "body").send_keys("e")
        box = wait_for(lambda: drv.find_elements(By.ID, "eq-3"))[0]
        box.clear()
        box.send_keys("Which sound tells the class that the lesson is over?")
        drv.find_element(By.ID, "ek-3").send_keys("C")
        box.send_keys(Keys.CONTROL, Keys.ENTER)
        wait_for(lambda: drv.execute_script("return focus") >= 4 or drv.execute_script("return cur") != scene)
        shots = DOCS if os.environ.get("CASU_SCREENSHOTS") == "1" else tmp_path  # docs/ only when asked
        drv.save_screenshot(str(shots / "review_questions.png"))
        # reload: the decisions come back from the file
        drv.refresh()
        wait_for(lambda: drv.execute_script("return cur"))
        drv.execute_script(f"openScene({json.dumps(scene)})")
        wait_for(lambda: drv.execute_script("return cur") == scene and drv.find_elements(By.ID, "item-3"))
        drv.execute_script("window.scrollTo(0, 0); document.getElementById('main').scrollTo(0, 0)")
        wait_for(lambda: drv.execute_script("return document.getElementById('timeline').complete"))
        drv.save_screenshot(str(shots / "review_page.png"))
        statuses = drv.execute_script("return items.slice(1, 4).map(i => i.status)")
        assert statuses == ["accept", "reject", "edit"]
        assert "lesson is over" in drv.find_element(By.ID, "item-3").text
        # readable in a 1280 px window too: the menus clear of the title, the timeline legible
        from test_review_family import GEOMETRY, assert_readable

        drv.set_window_size(1280, 900)
        wait_for(lambda: drv.execute_script("return innerWidth") == 1280)
        g = drv.execute_script(GEOMETRY)
        drv.save_screenshot(str(tmp_path / "review_page_1280.png"))
        assert_readable(g, 1)
    finally:
        drv.quit()
    rv = load(decisions_path(ds))
    assert {k[1]: d["reviewer"] for k, d in rv.final.items()} == {
        qids[0]: "ann",
        qids[1]: "ann",
        qids[2]: "ann",
    }
    edited = rv.final[("question", qids[2])]["edit"]
    assert edited["answer"] == "C"
    # a rebuild into the same folder applies them
    rep = build_small_v1(ds, tmp_path / "lib")
    rows = {
        r["id"]: r
        for c in ("contextual_reasoning", "entity_extraction", "role_inference", "counterfactual_reasoning")
        for r in pq.read_table(ds / c).to_pylist()
    }
    assert qids[0] in rows and qids[1] not in rows
    assert rows[qids[2]]["question"] == edited["question"] and rows[qids[2]]["answer"] == "C"
    assert rows[qids[2]]["options"] == edited["options"]
    applied = rep.review["applied"]  # review.apply adds family counts (all 0 in a v1 dataset)
    assert {k: applied[k] for k in ("questions_rejected", "questions_edited", "scenes_rejected")} == {
        "questions_rejected": 1,
        "questions_edited": 1,
        "scenes_rejected": 0,
    }
    assert all(v == 0 for k, v in applied.items() if k.startswith("famil"))
    card = (ds / "README.md").read_text()
    assert "3 items reviewed, 1 accepted, 1 edited, 1 rejected" in card


def test_a_taken_port_is_named_with_the_way_out(casu_small):
    import socket

    from conftest import call_main

    from casu_dataset.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, out, err = call_main(main, ["review", "--dataset", str(casu_small), "--port", str(port)])
    assert rc == 2 and out == ""
    assert f"--port {port}: in use on 127.0.0.1" in err and "--port 0" in err and "Traceback" not in err
    rc, _, err = call_main(main, ["review", "--dataset", str(casu_small), "--host", "no-such-host.invalid"])
    assert rc == 2 and "--host no-such-host.invalid: cannot listen there" in err
