"""Contrast-family generation: agents, critic panel, outputs, concurrency and resume.

A replay backend answers by prompt kind from two hand-written CASU-mini v2 families
(family_replay.py); each test changes one kind's reply to hit one path exactly. The generated
YAML goes through the library compiler and family_validity; the retrieval check uses the real
retriever on the embedded bank; the resume test kills a real `generate` process with SIGKILL."""

import hashlib
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from family_replay import TASK, ReplayBackend, default_reply, seat

from casu_dataset import cli
from casu_dataset.agents.families import bank_types, make_briefs, pmap, prompt_kind
from casu_dataset.agents.panel import (
    Panel,
    generate_families,
    run_family,
    write_outputs,
)
from casu_dataset.core.llm.backends import OpenAIBackend
from casu_dataset.families import compile as lib
from casu_dataset.families import validity as family_validity
from casu_dataset.families.validity import check_scenes
from casu_dataset.sounds.catalog import Catalog

ROOT = Path(__file__).resolve().parents[1]
TYPES = bank_types(Catalog.embedded())
SLOT, CROSSED = make_briefs(2, seed=0)  # brief 0 is a slot family, brief 1 a crossed one


@pytest.fixture(scope="module")
def retriever(session_cache):
    from casu_dataset.sounds.retrieval import Retriever

    return Retriever(Catalog.embedded(), cache_dir=session_cache)


def run(brief, overrides=None, k=3, m=2, retriever=None):
    b = ReplayBackend(overrides)
    row = run_family(b, Panel([b] * k, m, retriever=retriever), brief, TYPES, [TASK])
    return row, b


def test_accepted_families_compile_and_pass_validity(tmp_path, retriever):
    b = ReplayBackend()
    rows = generate_families(
        b, Panel([b] * 3, 2, retriever=retriever), [SLOT, CROSSED], TYPES, [TASK], concurrency=2
    )
    assert [r["status"] for r in rows] == ["kept", "kept"], [r["reason"] for r in rows]
    report = write_outputs(tmp_path / "fams.yaml", rows, {"settings": {}})
    scenes = lib.compile_families(tmp_path / "fams.yaml")
    assert len(scenes) == 8 and check_scenes(scenes) == []
    assert {s.shape for s in scenes} == {"slot", "crossed"}
    assert family_validity.main(["check", str(tmp_path / "fams.yaml")]) == 0
    rep = json.loads(report.read_text())
    assert rep["summary"] == {"families": 2, "kept": 2, "rejected": {}, "failed": 0}
    checks = {(c["check"], c["by"]) for c in rep["families"][1]["checks"]}
    assert checks == {
        ("naming", "mechanical"),
        ("compile", "mechanical"),
        ("distinct_fills", "retrieval"),
        ("naming", "critics"),
        ("distinct_fills", "critics"),
        ("coherence", "critics"),
        ("views", "critics"),
        ("consensus", "critics"),
    }
    assert [c["check"] for c in rep["families"][1]["checks"]][-2:] == ["views", "consensus"]
    # views: the crossed family's two speech versions and two fills, each with its two keys plausible
    views = {f["id"]: next(c for c in f["checks"] if c["check"] == "views") for f in rep["families"]}
    crossed = views[CROSSED.id]["items"]
    assert sorted((r["view"], r["shows"]) for r in crossed) == [
        ("sounds", "bell"),
        ("sounds", "whistle"),
        ("speech", "miss"),
        ("speech", "mum"),
    ]
    assert all(
        len(r["expect"]) == 2 and len(r["votes"]) == 3 and r["id"] and r["breaks"] == 0 for r in crossed
    )
    assert all(v["plausible"] == r["expect"] for r in crossed for v in r["votes"])
    by_view = {(r["view"], r["shows"]): set(r["expect"]) for r in crossed}
    assert (
        by_view[("speech", "mum")] | by_view[("speech", "miss")]
        == set("ABCD")
        == by_view[("sounds", "bell")] | by_view[("sounds", "whistle")]
    )
    [slot] = views[SLOT.id]["items"]  # a slot family's sounds decide its key: only its speech view
    assert (slot["view"], slot["shows"], slot["expect"]) == ("speech", "slot", list("ABCD"))
    assert all(v["plausible"] == list("ABCD") for v in slot["votes"])
    written = (tmp_path / "fams.yaml").read_text()  # the kept family's votes are comments in its YAML
    assert "#   views role" not in written and f"#   views {TASK} speech 'miss': design" in written
    cons = next(c for c in rep["families"][1]["checks"] if c["check"] == "consensus")
    assert {r["variant"] for r in cons["rows"]} == {"mum.bell", "mum.whistle", "miss.bell", "miss.whistle"}
    assert sorted(r["key"] for r in cons["rows"]) == list("ABCD")
    assert all(r["agree"] == 3 and all(v["reason"] for v in r["votes"]) for r in cons["rows"])
    # One call per variant for the narrator; k per variant for coherence and consensus; k per view
    # for views (slot: one speech view; crossed: two speech versions and two fills).
    assert b.calls["narrator"] == 8 and b.calls["coherence"] == 24 and b.calls["consensus"] == 24
    assert b.calls["views"] == 3 * 1 + 3 * 4
    assert "consensus counterfactual_reasoning mum.bell: key" in (tmp_path / "fams.yaml").read_text()


def _question_with(**change):
    def f(messages, reply):
        return json.dumps({**json.loads(reply), **change})

    return f


def _dup_options(messages, reply):
    d = json.loads(reply)
    first = next(iter(d["options"].values()))
    d["options"] = {k: first for k in d["options"]}
    return json.dumps(d)


def _bee_sounds_like_a_dog(messages, reply):
    d = json.loads(reply)
    d["fills"]["bee"] = {
        "type": "insect_buzz",
        "description": "A big dog barks loudly at the gate.",
        "keywords": ["dog", "bark", "barking"],
    }
    return json.dumps(d)


def _keep_one_for_miss(messages, reply):
    """Critics 1 and 2 keep only the first of the two options of the 'Miss' speech version."""
    if seat(messages) < 3 and "Miss, can I go now?" in messages[1]["content"]:
        d = json.loads(reply)
        return json.dumps({"plausible": d["plausible"][:1], "reason": "Miss means a teacher at home time"})
    return reply


def _drop_bee(messages, reply):
    """Critic 1 finds the bee option absurd without hearing the slot."""
    if seat(messages) == 1:
        d = json.loads(reply)
        bee = next(
            L for L, t in re.findall(r"^([ABCD])\. (.*)$", messages[1]["content"], re.M) if "sting" in t
        )
        return json.dumps(
            {"plausible": [L for L in d["plausible"] if L != bee], "reason": "no sign of insects"}
        )
    return reply


REJECTIONS = {
    # views: a crossed family's speech version that gives its key away, a slot family's absurd option
    "views keep one": (
        CROSSED,
        {"views": _keep_one_for_miss},
        "views",
        "critics",
        "questions.counterfactual_reasoning, speech view 'miss': 2 of 3 critics keep only [",
    ),
    "views drop one": (
        SLOT,
        {"views": _drop_bee},
        "views",
        "critics",
        "questions.counterfactual_reasoning, speech view 'slot': 1 of 3 critics drop [",
    ),
    "views no valid JSON": (
        SLOT,
        {"views": lambda ms, r: json.dumps({"plausible": ["E"]})},
        "views",
        "critics",
        "speech view 'slot': only 0 of 3 critics gave a valid vote",
    ),
    # consensus: two of three critics always answer A, so only the variant keyed A gets 2 votes
    "consensus": (
        SLOT,
        {"consensus": lambda ms, r: json.dumps({"answer": "A"}) if seat(ms) < 3 else r},
        "consensus",
        "critics",
        "critics picked its key",
    ),
    "coherence": (
        CROSSED,
        {
            "coherence": lambda ms, r: (
                json.dumps(
                    {"contradiction": True, "line": 2, "reason": "careful makes no sense after a whistle"}
                )
                if seat(ms) == 2 and "whistle" in ms[1]["content"] and "Mum" in ms[1]["content"]
                else r
            )
        },
        "coherence",
        "critics",
        "variant mum.whistle: 1 of 3 critics object",
    ),
    "critics give no valid JSON": (
        SLOT,
        {"coherence": lambda ms, r: "Looks fine to me."},
        "coherence",
        "critics",
        "only 0 of 3 critics gave a valid vote",
    ),
    "naming mechanical": (
        SLOT,
        {"question": _question_with(q="What did the thunder make the father do next?")},
        "naming",
        "mechanical",
        "thunder: 'thunder'",
    ),
    "naming critic": (
        CROSSED,
        {
            "naming": lambda ms, r: (
                json.dumps({"names_sound": True, "reason": "hints at a bell"}) if seat(ms) == 3 else r
            )
        },
        "naming",
        "critics",
        "hints at a bell",
    ),
    "distinct critic": (
        SLOT,
        {
            "distinct": lambda ms, r: json.dumps(
                {"confusable": [["thunder", "tree"]], "reason": "both are crashes"}
            )
        },
        "distinct_fills",
        "critics",
        "both are crashes",
    ),
    "compile": (
        SLOT,
        {"question": _dup_options},
        "compile",
        "mechanical",
        "options must be non-empty and distinct",
    ),
}


@pytest.mark.parametrize("name", list(REJECTIONS))
def test_each_rejection_is_recorded_with_its_reason(name):
    brief, overrides, check, by, detail = REJECTIONS[name]
    row, b = run(brief, overrides)
    assert row["status"] == "rejected" and row["rejected_by"] == check, row["reason"]
    assert row["reason"].startswith(f"{check} ({by}):") and detail in row["reason"], row["reason"]
    assert row["family"]["id"] == brief.id  # the rejected draft stays in the report
    last = row["checks"][-1]
    assert not last["passed"] and all(c["passed"] for c in row["checks"][:-1])
    if by == "mechanical":  # a mechanical rejection costs no critic call
        assert not {"naming", "distinct", "coherence", "views", "consensus"} & set(b.calls)
    if check == "views":  # views runs before consensus, which then costs nothing
        assert "consensus" not in b.calls and b.calls["coherence"] == 12
        broken = next(r for r in last["items"] if not r["passed"])
        assert broken["view"] == "speech" and len(broken["votes"]) == 3 and broken["expect"]


def test_retrieval_rejects_a_fill_that_retrieves_another_type(retriever):
    row, b = run(SLOT, {"script": _bee_sounds_like_a_dog}, retriever=retriever)
    assert row["rejected_by"] == "distinct_fills", row["reason"]
    assert row["reason"].startswith(
        "distinct_fills (retrieval): gen0_000_slot.bee cue: wanted insect_buzz, retrieved dog_bark"
    ), row["reason"]
    assert "consensus" not in b.calls


def test_invalid_json_and_bad_types_are_fed_back_and_retried():
    replies = iter(["Sure! Here is a lovely family for you.", "bad type", None])

    def script(messages, reply):
        r = next(replies)
        if r == "bad type":
            d = json.loads(reply)
            d["fills"]["dog"]["type"] = "dragon_roar"
            return json.dumps(d)
        return r or reply

    row, b = run(SLOT, {"script": script})
    assert row["status"] == "kept" and b.calls["script"] == 3
    script_calls = [ms for kind, ms in b.log if kind == "script"]
    assert "not valid: no JSON object found" in script_calls[1][-1]["content"]
    assert (
        "fills.dog.type: 'dragon_roar' is not a event sound type of the bank"
        in script_calls[2][-1]["content"]
    )


def test_agent_that_never_answers_is_a_failure_with_its_reason():
    row, b = run(CROSSED, {"script": lambda ms, r: "no"})
    assert row["status"] == "failed" and row["rejected_by"] == "agent"
    assert "script agent (gen0_001_crossed): no valid output after 3 attempts" in row["reason"]
    assert set(b.calls) == {"script"}


def test_compile_errors_of_the_draft_go_back_to_the_script_agent():
    calls = iter([0, 1])

    def script(messages, reply):
        if next(calls, 1) == 0:  # a crossed draft whose versions do not differ
            d = json.loads(reply)
            d["turns"] = [
                dict(t, text=t["text"] if isinstance(t["text"], str) else t["text"]["mum"])
                for t in d["turns"]
            ]
            d["turns"][1]["text"] = {
                "mum": "Mum, can I go now? Please?",
                "miss": "Mum, can I go now? Please?",
            }
            return json.dumps(d)
        return reply

    row, b = run(CROSSED, {"script": script})
    assert row["status"] == "kept" and b.calls["script"] == 2
    feedback = [ms for kind, ms in b.log if kind == "script"][1][-1]["content"]
    assert "the two versions are identical" in feedback


# --- OpenAI-compatible backend: requests in flight, resume after SIGKILL ---------------------------


class _ReplayServer(BaseHTTPRequestHandler):
    """Answers chat requests from family_replay; counts each distinct request it answers, and
    after `block_after` answers holds every further request until `gate` opens."""

    lock = threading.Lock()
    answered: dict = {}
    in_flight = 0
    max_in_flight = 0
    delay = 0.0
    block_after = None
    gate = threading.Event()

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        cls = _ReplayServer
        key = hashlib.sha256(body).hexdigest()
        with cls.lock:
            blocked = cls.block_after is not None and sum(cls.answered.values()) >= cls.block_after
            if not blocked:
                cls.answered[key] = cls.answered.get(key, 0) + 1
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            if blocked:
                cls.gate.wait(60)
                self.send_response(503)
                self.end_headers()
                return
            time.sleep(cls.delay)
            text = default_reply(json.loads(body)["messages"])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(
                json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            )
        except OSError:  # the client was killed
            pass
        finally:
            with cls.lock:
                cls.in_flight -= 1

    def log_message(self, *a):
        pass


@pytest.fixture
def replay_server():
    s = _ReplayServer
    s.answered, s.in_flight, s.max_in_flight, s.delay, s.block_after = {}, 0, 0, 0.0, None
    s.gate = threading.Event()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _ReplayServer)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    s.gate.set()
    srv.shutdown()


@pytest.mark.parametrize("concurrency", [1, 3])
def test_openai_backend_keeps_at_most_concurrency_requests_in_flight(replay_server, concurrency):
    _ReplayServer.delay = 0.15
    b = OpenAIBackend(replay_server, "replay", concurrency=concurrency)
    system = {"role": "system", "content": "You judge whether a listener can tell sounds apart by ear."}
    t = time.perf_counter()
    out = pmap(lambda i: b.complete([system, {"role": "user", "content": f"Sounds: {i}"}]), range(6))
    assert len(out) == 6 and all("confusable" in o for o in out)
    assert _ReplayServer.max_in_flight == concurrency
    assert time.perf_counter() - t >= 0.15 * 6 / concurrency * 0.9


def _generate(url, tmp_path, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "casu_dataset",
            "generate",
            "--families",
            "2",
            "--backend",
            "openai",
            "--base-url",
            url,
            "--llm-model",
            "replay",
            "--k",
            "2",
            "--m",
            "2",
            "--tasks",
            TASK,
            "--concurrency",
            "3",
            "--no-retrieval",
            "--cache",
            str(tmp_path / "cache"),
            "--out",
            str(tmp_path / "gen.yaml"),
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _cached_rows(tmp_path) -> int:
    db = tmp_path / "cache" / "llm_responses.sqlite"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(str(db)) as c:
            return c.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.OperationalError:  # table not created yet
        return 0


def test_generate_resumes_after_sigkill_without_repeating_calls(replay_server, tmp_path):
    s = _ReplayServer
    s.block_after = 20
    p = _generate(replay_server, tmp_path)
    deadline = time.time() + 90
    while _cached_rows(tmp_path) < 20:  # answered calls are in the cache; the rest are held
        assert p.poll() is None and time.time() < deadline, (
            p.stdout.read() if p.poll() is not None else "timeout"
        )
        time.sleep(0.1)
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait(30)
    assert p.returncode == -signal.SIGKILL and not (tmp_path / "gen.yaml").exists()
    assert sum(s.answered.values()) == 20 and _cached_rows(tmp_path) == 20
    s.block_after = None
    s.gate.set()
    p = _generate(replay_server, tmp_path)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, out
    assert max(s.answered.values()) == 1, "a finished call was sent again"
    rep = json.loads((tmp_path / "gen.report.json").read_text())
    assert (
        rep["cache"]["hits"] == 20
        and sum(rep["backend_calls_by_kind"].values()) == sum(s.answered.values()) - 20
    )
    assert rep["summary"]["kept"] == 2, out
    scenes = lib.compile_families(tmp_path / "gen.yaml")
    assert len(scenes) == 8 and check_scenes(scenes) == []


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--families", "0"], "--families 0: must be >= 1"),
        (["--families", "1", "--tasks", "sing_along"], "unknown ['sing_along']"),
        (["--families", "1", "--concurrency", "0"], "--concurrency 0: must be >= 1"),
        (["--families", "1", "--k", "2", "--m", "3"], "need 1 <= m <= k"),
    ],
)
def test_generate_flags_are_checked_before_any_call(tmp_path, capsys, argv, msg):
    rc = cli.main(
        [
            "generate",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--llm-model",
            "x",
            "--out",
            str(tmp_path / "f.yaml"),
            *argv,
        ]
    )
    assert rc == 2 and msg in capsys.readouterr().err


def test_prompt_kinds_are_told_apart():
    assert (
        prompt_kind(
            [
                {
                    "role": "system",
                    "content": "You write one multiple-choice question for a contrast family "
                    "of audio scenes, as JSON. More.",
                }
            ]
        )
        == "question"
    )
    assert prompt_kind([{"role": "user", "content": "hi"}]) is None
