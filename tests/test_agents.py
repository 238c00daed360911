"""Agent pipeline: structured output, retries, refusals, consensus filter, cache, HTTP backend.

Control flow is driven by a replay backend (a fixed list of replies) so each failure mode is
hit exactly; the real paths run against SmolLM2-135M locally and through a real
`transformers serve` process on localhost."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from conftest import transformers_serve

from casu_dataset.agents.pipeline import (
    Candidate,
    Vote,
    critic_votes,
    run_pipeline,
    script_agent,
)
from casu_dataset.agents.structured import StructuredOutputError, ask_json, extract_json
from casu_dataset.core.llm.backends import BackendError, OpenAIBackend
from casu_dataset.core.llm.cache import CachedBackend, ResponseCache
from casu_dataset.script.schema import parse_script


class Replay:
    """Returns the given replies in order and records what it was asked."""

    fingerprint = "replay"

    def __init__(self, replies):
        self.replies = list(replies)
        self.calls = []

    def complete(self, messages, schema=None, max_tokens=512, temperature=0.0):
        self.calls.append(messages)
        return self.replies.pop(0)


def test_extract_json_from_fences_and_prose():
    assert extract_json('Sure!\n```json\n{"answer": "B"}\n```') == {"answer": "B"}
    assert extract_json('x {"a": "}"} y') == {"a": "}"}
    with pytest.raises(ValueError):
        extract_json("no json here")


def test_invalid_json_then_valid_retries_with_feedback():
    b = Replay(["I think B.", '{"answer": "E"}', '{"answer": "B"}'])
    assert ask_json(b, [{"role": "user", "content": "q"}], Vote, "critic").answer == "B"
    assert len(b.calls) == 3
    assert "not valid" in b.calls[1][-1]["content"] and "answer" in b.calls[2][-1]["content"]


def test_refusal_is_retried_then_reported():
    b = Replay(["I'm sorry, but I can't help with that.", '{"answer": "A"}'])
    assert ask_json(b, [], Vote, "critic").answer == "A"
    b = Replay(["As an AI, I cannot answer."] * 3)
    with pytest.raises(StructuredOutputError, match="critic: no valid output after 3 attempts: refusal"):
        ask_json(b, [], Vote, "critic", retries=3)


SCRIPT_OK = {
    "place": "station",
    "speech_type": "monologue",
    "background": {"description": "trains", "keywords": ["train"]},
    "speakers": [{"id": "A", "role": "guard", "gender": "male"}],
    "turns": [{"speaker": "A", "text": "Mind the gap."}],
    "events": [
        {
            "id": "e1",
            "description": "a train horn",
            "keywords": ["horn"],
            "anchor": {"type": "after_turn", "turn": 0, "offset": 0.3},
        }
    ],
}


def test_script_agent_feeds_schema_errors_back():
    bad = json.loads(json.dumps(SCRIPT_OK))
    bad["turns"][0]["speaker"] = "Z"
    b = Replay([json.dumps(bad), json.dumps(SCRIPT_OK)])
    s = script_agent(b, "g1", "station", {"background": ["x"], "event": ["y"]}, "monologue")
    assert s.id == "g1" and s.events[0].anchor.type == "after_turn"
    assert "unknown speaker 'Z'" in b.calls[1][-1]["content"]


def test_consensus_filter_keeps_only_agreed_keys():
    cand = json.dumps(
        {
            "questions": [
                {
                    "question": "What sounded?",
                    "options": ["horn", "bell", "dog", "cat"],
                    "answer": "A",
                    "rationale": "the horn",
                    "layers": ["event"],
                }
            ]
        }
    )

    def run(votes, m):
        main = Replay(
            [json.dumps(SCRIPT_OK), '{"description": "A guard speaks, then a train horn sounds."}', cand]
        )
        critics = [Replay([json.dumps({"answer": v}) if v else "no idea"] * 2) for v in votes]
        return run_pipeline(
            main,
            "g1",
            "station",
            {"background": [], "event": []},
            "monologue",
            critics=critics,
            k=len(votes),
            m=m,
            tasks=["entity_extraction"],
            retries=1,
        )

    kept = run(["A", "A", "B"], m=2)
    assert len(kept.kept) == 1 and kept.kept[0]["votes"] == ["A", "A", "B"] and kept.kept[0]["agree"] == 2
    rej = run(["A", "A", "B"], m=3)
    assert rej.kept == [] and rej.rejected[0]["agree"] == 2
    none = run(["A", None, None], m=2)  # invalid critic replies count as no vote
    assert none.rejected[0]["votes"] == ["A", None, None]
    with pytest.raises(ValueError, match="1 <= m <= k"):
        run_pipeline(Replay([]), "g", "p", {}, "monologue", k=2, m=3)


def test_pipeline_records_failures_instead_of_crashing():
    r = run_pipeline(
        Replay(["nope"] * 3),
        "g1",
        "station",
        {"background": [], "event": []},
        "monologue",
        k=1,
        m=1,
        retries=3,
    )
    assert r.script is None and "script agent (g1): no valid output after 3 attempts" in r.failures[0]


def test_response_cache_makes_reruns_free(tmp_path):
    b = Replay(['{"answer": "C"}'])
    c = CachedBackend(b, ResponseCache(tmp_path / "r.sqlite"))
    assert ask_json(c, [{"role": "user", "content": "q"}], Vote, "x").answer == "C"
    c2 = CachedBackend(Replay([]), ResponseCache(tmp_path / "r.sqlite"))  # a new process, same cache file
    c2.fingerprint = "replay"
    assert ask_json(c2, [{"role": "user", "content": "q"}], Vote, "x").answer == "C"
    assert c2.cache.hits == 1


class _Flaky(BaseHTTPRequestHandler):
    script: list = []
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Flaky.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        code, payload = _Flaky.script.pop(0)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(payload).encode())

    def log_message(self, *a):
        pass


@pytest.fixture
def flaky_server():
    srv = HTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def _ok(text):
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def test_http_backend_retries_falls_back_and_hides_the_key(flaky_server):
    _Flaky.seen.clear()
    _Flaky.script[:] = [
        (503, {"error": "busy"}),
        (400, {"error": "response_format json_schema unsupported"}),
        _ok('{"answer": "D"}'),
    ]
    b = OpenAIBackend(flaky_server, "m", api_key="sk-secret-123", backoff=0.01)
    assert ask_json(b, [{"role": "user", "content": "q"}], Vote, "critic").answer == "D"
    assert "response_format" in _Flaky.seen[0][1] and "response_format" not in _Flaky.seen[2][1]
    assert _Flaky.seen[0][0]["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(b)
    _Flaky.script[:] = [(401, {"error": "bad key"})]
    with pytest.raises(BackendError) as e:
        b.complete([{"role": "user", "content": "q"}])
    assert "401" in str(e.value) and "sk-secret" not in str(e.value)


def test_http_backend_sends_no_key_header_without_a_key_and_reports_bad_replies(flaky_server, monkeypatch):
    for var in ("CASU_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    _Flaky.seen.clear()
    _Flaky.script[:] = [(429, {"error": "slow down"}), _ok("fine"), (200, {"id": "x"})]
    b = OpenAIBackend(flaky_server, "m", backoff=0.01)
    assert b.complete([{"role": "user", "content": "q"}]) == "fine"
    assert len(_Flaky.seen) == 2 and all("authorization" not in h for h, _ in _Flaky.seen)
    with pytest.raises(BackendError, match="malformed response"):
        b.complete([{"role": "user", "content": "q"}])


def test_real_smollm2_local_structured_vote():
    from casu_dataset.core.llm.backends import LocalBackend

    b = LocalBackend()
    script = parse_script({"id": "g1", **SCRIPT_OK})
    cand = Candidate(
        question="Which sound follows the guard's warning?",
        options=["A train horn", "A bell", "A dog", "Applause"],
        answer="A",
        rationale="horn",
        layers=["event"],
    )

    class Recording:  # the real model, its replies kept
        def __init__(self):
            self.replies = []

        def complete(self, messages, **kw):
            self.replies.append(b.complete(messages, **kw))
            return self.replies[-1]

    def vote_of(reply):
        try:
            return Vote.model_validate(extract_json(reply)).answer
        except ValueError:
            return None

    critics = [Recording(), Recording()]
    votes = critic_votes(critics, script, "A guard says mind the gap; a train horn sounds.", cand, retries=2)
    assert len(votes) == 2 and votes[0] == votes[1]  # one greedy model: the same vote twice
    for vote, c in zip(votes, critics):
        # the model was asked, until its first valid reply or 2 attempts; that reply is the vote,
        # and no vote only when none of its replies held one
        parsed = [vote_of(r) for r in c.replies]
        assert c.replies and all(r.strip() for r in c.replies), c.replies
        assert len(c.replies) == (parsed.index(vote) + 1 if vote else 2) and parsed[:-1] == [None] * (
            len(parsed) - 1
        )
        assert vote == parsed[-1] and vote in (None, "A", "B", "C", "D")


@pytest.fixture(scope="module")
def served_smollm2():
    from casu_dataset.core.llm.local import smollm2_dir

    path = str(smollm2_dir())
    with transformers_serve(path) as url:
        yield url, path


def test_real_openai_compatible_server(served_smollm2):
    url, model = served_smollm2
    b = OpenAIBackend(url, model)
    text = b.complete(
        [{"role": "user", "content": 'Reply with JSON {"answer": "A"}.'}],
        schema=Vote.model_json_schema(),
        max_tokens=24,
    )
    assert isinstance(text, str) and text
    try:
        v = ask_json(
            b,
            [{"role": "user", "content": 'Reply with JSON {"answer": "A"}.'}],
            Vote,
            "critic",
            retries=2,
            max_tokens=24,
        )
        assert v.answer in "ABCD"
    except (
        StructuredOutputError
    ) as err:  # a 135M model may fail; the failure must be reported, not raised raw
        assert len(err.attempts) == 2


def test_real_server_writes_a_family_file_with_reasons(served_smollm2, tmp_path):
    """`generate --families` end to end through a real server: the plumbing (CLI, concurrency,
    structured output, cache, report), not the quality of a 135M model's family."""
    from casu_dataset import cli
    from casu_dataset.families.compile import compile_families
    from casu_dataset.families.validity import check_scenes

    url, model = served_smollm2
    out = tmp_path / "fams.yaml"
    argv = [
        "generate",
        "--families",
        "1",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--llm-model",
        model,
        "--retries",
        "1",
        "--k",
        "1",
        "--m",
        "1",
        "--max-tokens",
        "4",
        "--no-retrieval",
        "--tasks",
        "contextual_reasoning",
        "--concurrency",
        "2",
        "--cache",
        str(tmp_path),
        "--out",
        str(out),
    ]
    assert cli.main(argv) == 0
    rep = json.loads((tmp_path / "fams.report.json").read_text())
    row = rep["families"][0]
    assert row["status"] == "kept" or row["reason"], row
    assert rep["backend_calls_by_kind"]["script"] == 1 and rep["cache"]["misses"] >= 1
    assert check_scenes(compile_families(out)) == []
    assert cli.main(argv) == 0  # a re-run is answered from the cache
    assert json.loads((tmp_path / "fams.report.json").read_text())["backend_calls_by_kind"] == {}
