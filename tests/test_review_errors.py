"""Bad inputs to the review: `python -m casu_dataset review` given a folder it cannot serve,
decisions that break the decision schema (by the API or as lines of a decisions file), decisions
for items the build does not have, requests from another origin, and edits that would move an
option's text (and so a variant's key). Each is a named error, a counted skip or the right
result; the rules are in tests/bad_input_corpus.py."""

from __future__ import annotations

import json
import threading
import traceback

import pytest
from bad_input_corpus import (
    OK,
    ROLE,
    SKIP,
    Ctx,
    E,
    Outcome,
    casu,
    check_case,
    duplicate_ids,
    expect_error,
)
from conftest import tiny_dataset

# -- helpers that make one bad thing each -------------------------------------------------------


def decision(**rec):
    from casu_dataset.review.decisions import DecisionError, validate

    base = {"reviewer": "ann", "kind": "question", "item": "s/q1", "action": "accept"}
    return expect_error(validate, DecisionError, {**base, **rec})


def decision_raw(rec):
    from casu_dataset.review.decisions import DecisionError, validate

    return expect_error(validate, DecisionError, rec)


def edit(**e):
    base = {"question": "Which sound?", "options": ["a bell", "a siren", "a dog", "rain"], "answer": "A"}
    return decision(action="edit", edit={**base, **e})


def decisions_file(c: Ctx, *lines) -> Outcome:
    """A decisions file with hand-written bad lines: load reports each by line number, keeps the rest."""
    from casu_dataset.review.decisions import load

    f = c.tmp / "d.jsonl"
    good = {
        "time": "2026-01-01T00:00:00+00:00",
        "reviewer": "ann",
        "kind": "question",
        "item": "s/q1",
        "action": "accept",
    }
    f.write_text("\n".join([json.dumps(good), *(json.dumps({**good, **x}) for x in lines)]) + "\n")
    try:
        rv = load(f)
    except Exception:  # noqa: BLE001
        return Outcome(None, "", traceback.format_exc())
    msg = "\n".join(m for _, m in rv.bad_lines)
    # a counted skip: each bad line named, the good one kept
    ok = len(rv.bad_lines) == len(lines) and rv.status("question", "s/q1") == "accept"
    return Outcome(0 if ok else 1, f"skipped {len(rv.bad_lines)} line(s):\n{msg}")


def apply_unknown(c: Ctx) -> Outcome:
    """Decisions for items not in the build: listed as unknown, never counted as reviewed."""
    from casu_dataset.review.apply import apply_review
    from casu_dataset.review.decisions import DecisionLog

    log = DecisionLog(c.tmp / "u.jsonl")
    log.append({"reviewer": "ann", "kind": "question", "item": "ghost/q9", "action": "reject"})
    log.append({"reviewer": "ann", "kind": "scene", "item": "ghost", "action": "reject"})
    log.append({"reviewer": "ann", "kind": "question", "item": "s0/q0", "action": "accept"})
    rows = {
        "scenes": [{"scene_id": "s0"}],
        "role_inference": [{"id": "s0/q0", "scene_id": "s0", "task": "role_inference"}],
    }
    res = apply_review(rows, log.review())
    out = json.dumps({k: res.get(k) for k in ("reviewed", "rejected", "unknown")})
    ok = (
        res["reviewed"] == 1
        and res["rejected"] == 0
        and sorted(res.get("unknown", [])) == ["question ghost/q9", "scene ghost"]
    )
    return Outcome(0 if ok else 1, f"skipped unknown items: {out}")


def review_truncated(c: Ctx, which: str) -> Outcome:
    d = tiny_dataset(c.tmp / "rv", 2, "rv")
    victim = next((d / which).glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:64])
    return casu("review", "--dataset", str(d), "--port", "0")


def origin_case(c: Ctx, origin: str | None, host: str | None = None) -> Outcome:
    import http.client

    from casu_dataset.review.server import serve

    srv, data = serve(c.ds, "127.0.0.1", 0, "ann")
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        import re

        page = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        page.request("GET", "/")
        html = page.getresponse().read().decode()
        token = re.search(r'name="casu-token" content="([^"]+)"', html) or re.search(
            r'"token":\s*"([^"]+)"', html
        )
        token = token.group(1) if token else ""
        body = json.dumps({"kind": "question", "item": "b_scene0/q0", "action": "accept"}).encode()
        h = {
            "Host": host or f"127.0.0.1:{port}",
            "Content-Type": "application/json",
            "X-CASU-Token": token,
            "Content-Length": str(len(body)),
        }
        if origin is not None:
            h["Origin"] = origin.format(port=port)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/api/decision", body=body, headers=h)
        r = conn.getresponse()
        text = r.read().decode()
    finally:
        srv.shutdown()
        srv.server_close()
    return Outcome(0 if r.status == 200 else 2, f"HTTP {r.status}: {text}")


def option_edit(old: list[str], new: list[str]) -> Outcome:
    from casu_dataset.review.decisions import option_moves

    why = option_moves(old, new)
    return Outcome(2 if why else 0, why or "accepted")


OPTS = [
    "Because the school bell rang",
    "Because the fire alarm went off",
    "Because thunder rolled",
    "Because the coach blew the horn",
]


def family_rows(opts=OPTS):
    rows = {"scenes": [], ROLE: []}
    for v, key in zip("abcd", "ABCD"):
        sid = f"fam.{v}"
        rows["scenes"].append({"scene_id": sid, "family_id": "fam"})
        rows[ROLE].append(
            {
                "id": f"{sid}/q",
                "scene_id": sid,
                "task": ROLE,
                "family_id": "fam",
                "question": "Why do they line up?",
                "options": list(opts),
                "answer": key,
            }
        )
    return rows


def apply_family_edit(c: Ctx, new_opts: list[str], question: str | None = None) -> Outcome:
    """A hand-written family_question edit line, applied by the next build's review step."""
    from casu_dataset.review.apply import apply_review
    from casu_dataset.review.decisions import DecisionLog

    log = DecisionLog(c.tmp / "fam.jsonl")
    edit = {"options": new_opts, **({"question": question} if question else {})}
    log.append(
        {"reviewer": "ann", "kind": "family_question", "item": f"fam/{ROLE}", "action": "edit", "edit": edit}
    )
    rows = family_rows()
    res = apply_review(rows, log.review())
    keys = {r["answer"]: r["options"][ord(r["answer"]) - 65] for r in rows[ROLE]}
    if res["refused"]:
        from casu_dataset.dataset.card import _edits_text

        unchanged = all(r["options"] == OPTS for r in rows[ROLE])
        shown = "- refused: family_question" in _edits_text(res["edits"], res["refused"])
        return Outcome(
            2 if unchanged and shown else 0,
            f"refused: {res['refused']} (rows unchanged: {unchanged}, on the card: {shown})",
        )
    from casu_dataset.dataset.card import _edits_text

    card = _edits_text(res["edits"], res["refused"])  # the card lists the edit, old -> new
    listed = len(res["edits"]) == 1 and all(
        f"option {chr(65 + i)} {a!r} -> {b!r}" in card for i, a, b in res["edits"][0]["options"]
    )
    return Outcome(0 if listed else 1, f"applied, keys now {keys}; edits listed: {card}")


# -- the corpus: (id, run(ctx) -> Outcome, expectation) ----------------------------------------

CASES = [
    # the review command: a folder it cannot serve, a port out of range
    (
        "review-missing-dataset",
        lambda c: casu("review", "--dataset", str(c.tmp / "nope"), "--port", "0"),
        (E, 2, "--dataset", "not a built CASU folder"),
    ),
    (
        "review-port-out-of-range",
        lambda c: casu("review", "--dataset", str(c.ds), "--port", "70000"),
        (E, 2, "--port", "0..65535"),
    ),
    ("review-truncated-scenes", lambda c: review_truncated(c, "scenes"), (E, 2, "--dataset", "scenes")),
    ("review-truncated-questions", lambda c: review_truncated(c, ROLE), (E, 2, "--dataset", ROLE)),
    # review decisions: the same schema as the data
    ("decision-time-int", lambda c: decision(time=5), (E, 2, "time")),
    ("decision-time-garbage", lambda c: decision(time="yesterday"), (E, 2, "time")),
    ("decision-edit-string", lambda c: decision(action="edit", edit="str"), (E, 2, "edit", "object")),
    ("decision-edit-on-accept", lambda c: decision(edit={"question": "x"}), (E, 2, "edit", "accept")),
    ("decision-answer-list", lambda c: edit(answer=["A"]), (E, 2, "edit.answer")),
    ("decision-answer-AB", lambda c: edit(answer="AB"), (E, 2, "edit.answer", "'AB'")),
    ("decision-answer-empty", lambda c: edit(answer=""), (E, 2, "edit.answer")),
    ("decision-answer-lowercase", lambda c: edit(answer="a"), (E, 2, "edit.answer")),
    (
        "decision-answer-missing",
        lambda c: decision(action="edit", edit={"question": "q", "options": list("abcd")}),
        (E, 2, "edit.answer"),
    ),
    ("decision-options-ints", lambda c: edit(options=[1, 2, 3, 4]), (E, 2, "edit.options")),
    ("decision-options-string", lambda c: edit(options="abcd"), (E, 2, "edit.options")),
    ("decision-question-list", lambda c: edit(question=["q"]), (E, 2, "edit.question")),
    ("decision-edit-extra-field", lambda c: edit(rationale="because"), (E, 2, "edit", "rationale")),
    ("decision-reviewer-list", lambda c: decision(reviewer=["ann"]), (E, 2, "reviewer")),
    ("decision-item-int", lambda c: decision(item=5), (E, 2, "item")),
    ("decision-kind-unknown", lambda c: decision(kind="paragraph"), (E, 2, "kind 'paragraph'")),
    ("decision-action-unknown", lambda c: decision(action="maybe"), (E, 2, "action 'maybe'")),
    ("decision-comment-dict", lambda c: decision(comment={"a": 1}), (E, 2, "comment")),
    ("decision-not-object", lambda c: decision_raw(["A"]), (E, 2, "JSON object")),
    ("decisions-file-bad-time", lambda c: decisions_file(c, {"time": 5}), (SKIP, "line 2", "time")),
    (
        "decisions-file-edit-str",
        lambda c: decisions_file(c, {"action": "edit", "edit": "str"}),
        (SKIP, "line 2"),
    ),
    (
        "decisions-file-answer-list",
        lambda c: decisions_file(
            c, {"action": "edit", "edit": {"question": "q", "options": list("abcd"), "answer": ["A"]}}
        ),
        (SKIP, "line 2", "edit.answer"),
    ),
    (
        "decisions-file-answer-AB",
        lambda c: decisions_file(
            c, {"action": "edit", "edit": {"question": "q", "options": list("abcd"), "answer": "AB"}}
        ),
        (SKIP, "line 2", "edit.answer"),
    ),
    (
        "decisions-file-mixed",
        lambda c: decisions_file(c, {"time": 5}, {"reviewer": 3}, {"item": None}),
        (SKIP, "line 2", "line 3", "line 4"),
    ),
    ("decisions-unknown-items-not-counted", apply_unknown, (SKIP, "ghost")),
    # requests to the review server: only its own origin may write
    (
        "review-origin-no-port",
        lambda c: origin_case(c, "http://localhost"),
        (E, 2, "403", "Origin 'http://localhost'"),
    ),
    ("review-origin-other-ip", lambda c: origin_case(c, "http://10.1.2.3:{port}"), (E, 2, "403", "10.1.2.3")),
    ("review-origin-https", lambda c: origin_case(c, "https://127.0.0.1:{port}"), (E, 2, "403", "https")),
    (
        "review-origin-localhost-vs-host",
        lambda c: origin_case(c, "http://localhost:{port}"),
        (E, 2, "403", "localhost"),
    ),
    (
        "review-host-without-port",
        lambda c: origin_case(c, "http://127.0.0.1", host="127.0.0.1"),
        (E, 2, "403", "Origin"),
    ),
    ("review-origin-exact-accepted", lambda c: origin_case(c, "http://127.0.0.1:{port}"), (OK, "HTTP 200")),
    # edits of a family question: rewording an option is applied and listed on the card; moving an
    # option's text to another letter (which would move a variant's key) is refused
    (
        "review-edit-swaps-options",
        lambda c: option_edit(OPTS, [OPTS[1], OPTS[0], OPTS[2], OPTS[3]]),
        (E, 2, "edit.options[0] (A)", "original option B"),
    ),
    (
        "review-edit-moves-reworded-option",
        lambda c: option_edit(
            OPTS, [OPTS[0], OPTS[1], "Because the coach blew his horn", "Because thunder rumbled"]
        ),
        (E, 2, "edit.options[2] (C)", "original option D"),
    ),
    (
        "review-edit-rewording-accepted",
        lambda c: option_edit(OPTS, [OPTS[0], "Because the fire alarm sounded", OPTS[2], OPTS[3]]),
        (OK, "accepted"),
    ),
    (
        "review-apply-swap-refused",
        lambda c: apply_family_edit(c, [OPTS[1], OPTS[0], OPTS[2], OPTS[3]]),
        (E, 2, "refused", "rows unchanged: True"),
    ),
    (
        "review-apply-rewording-listed",
        lambda c: apply_family_edit(c, [OPTS[0], OPTS[1], "Because of thunder", OPTS[3]]),
        (OK, "edits listed"),
    ),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)
