"""API keys and tokens never reach a user: an error line, a --verbosity DEBUG log or a written
file shows no run of a key's characters, whether the key is in the message, echoed back by the
server (in its body or a header) or not shaped like a key at all. The corpus part follows the
rules in tests/bad_input_corpus.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from bad_input_corpus import Ctx, E, Outcome, casu, check_case, duplicate_ids, harness
from conftest import tiny_dataset
from helpers import harness_argv

# -- helpers: servers that refuse a key, a key in the environment -------------------------------


def secret_in_error(c: Ctx) -> Outcome:
    """A key and a bearer token in an error line are redacted (a server echoing the key end to end
    is below, after the corpus)."""
    from casu_dataset.core.redact import redact

    key = "sk-live-abcdefghijklmnopqrstuvwx"
    msg = redact(f"HTTP 401: Incorrect API key provided: {key}. Authorization: Bearer {key}")
    return Outcome(2 if key not in msg and "Incorrect API key" in msg else 0, msg)


class _Refuser(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers 401 and echoes the key's tail."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = (self.headers.get("Authorization") or "")[-9:]
        body = json.dumps({"error": {"message": f"Incorrect API key provided: key ending {key}"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Echo-Key", self.headers.get("Authorization") or "")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@contextlib.contextmanager
def refusing_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Refuser)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


KEY = "sk-test-abcdefghijklmnopSECRET123"


@contextlib.contextmanager
def key_env(name="CASU_LLM_API_KEY", value=KEY):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def no_key_fragment(o: Outcome, key: str = KEY) -> Outcome:
    """A named error that shows no run of 4+ characters of the key (besides the public 'sk-t')."""
    frags = [key[i : i + 6] for i in range(3, len(key) - 5)]
    leaked = [f for f in frags if f in o.text]
    if leaked:
        return Outcome(0, f"KEY FRAGMENT {leaked[:3]} in: {o.text[-600:]}")
    return o


def generate_401(c: Ctx, families: bool) -> Outcome:
    with refusing_server() as url, key_env():
        argv = [
            "generate",
            "--backend",
            "openai",
            "--base-url",
            url,
            "--llm-model",
            "m",
            "--out",
            str(c.tmp / "gen.json"),
            "--cache",
            str(c.tmp / "cache"),
            "--retries",
            "1",
        ]
        argv += ["--families", "1", "--no-retrieval"] if families else ["--place", "kitchen"]
        return no_key_fragment(casu(*argv))


def harness_401(c: Ctx) -> Outcome:
    with refusing_server() as url, key_env("OPENAI_API_KEY"):
        return no_key_fragment(
            c.run("--model_args", f"model=m,base_url={url},max_retries=0", model="openai-audio")
        )


def debug_log_leak(c: Ctx, env_name: str) -> Outcome:
    """--verbosity DEBUG against a server that echoes the Authorization header in a response
    header: the log must not show the key (the HTTP client's raw header dumps are off)."""
    from harness.cli.run import set_cli_verbosity

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {n: logging.getLogger(n).level for n in ("", "httpx", "httpcore", "openai")}
    try:
        with key_env(env_name), refusing_server() as url, contextlib.redirect_stderr(buf):
            set_cli_verbosity("DEBUG")
            from casu_dataset.core.llm.backends import BackendError, OpenAIBackend

            b = OpenAIBackend(url, "m", api_key=os.environ[env_name], max_retries=0)
            try:
                b.complete([{"role": "user", "content": "hi"}])
            except BackendError as err:
                logging.getLogger("casu_dataset").error(
                    "backend said: %s (token %s)", err, os.environ[env_name]
                )
    finally:
        root.removeHandler(handler)
        for n, lv in levels.items():
            logging.getLogger(n).setLevel(lv)
    return no_key_fragment(Outcome(2, buf.getvalue() + "\n401 named"), os.environ.get(env_name) or KEY)


def redact_case(text: str, key: str = KEY) -> Outcome:
    from casu_dataset.core.redact import redact

    with key_env("OPENAI_API_KEY", key):
        out = redact(text)
    return no_key_fragment(Outcome(2, out + " (redacted)"), key)


# -- the corpus: (id, run(ctx) -> Outcome, expectation) ----------------------------------------

CASES = [
    # a key in an error line
    ("redact-key-in-error", secret_in_error, (E, 2, "Incorrect API key")),
    # a server that refuses the key (and echoes its tail); debug logs; fragments of a key
    ("generate-openai-401", lambda c: generate_401(c, False), (E, 3, "401")),
    ("generate-families-openai-401", lambda c: generate_401(c, True), (E, 3, "401")),
    ("harness-openai-401-tail-echoed", harness_401, (E, 3, "401")),
    ("debug-log-openai-key-header", lambda c: debug_log_leak(c, "OPENAI_API_KEY"), (E, 2, "401 named")),
    ("debug-log-hub-token", lambda c: debug_log_leak(c, "HF_TOKEN"), (E, 2, "401 named")),
    ("redact-key-tail", lambda c: redact_case(f"key ending {KEY[-9:]}"), (E, 2, "redacted")),
    ("redact-key-head", lambda c: redact_case(f"key starting {KEY[:12]}..."), (E, 2, "redacted")),
    ("redact-key-middle", lambda c: redact_case(f"fragment {KEY[10:18]} seen"), (E, 2, "redacted")),
    (
        "redact-short-hex-key",
        lambda c: redact_case("tail: cafe1234", "0123456789abcdefcafe1234"),
        (E, 2, "redacted"),
    ),
]


def test_case_ids_are_unique():
    assert duplicate_ids(CASES) == []


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(corpus_ctx, tmp_path, case_id, run, expect):
    check_case(corpus_ctx, tmp_path, case_id, run, expect)


# -- a key echoed by an OpenAI-compatible server --------------------------------------------------


class EchoKey(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that answers 401 and echoes the key it was sent (as some do)."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        body = json.dumps(
            {
                "error": {
                    "message": f"Incorrect API key provided: {key}. Header was 'Authorization: Bearer {key}'",
                    "code": "invalid_api_key",
                }
            }
        )
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture
def echo_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), EchoKey)
    srv.status = 401
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("key", ["sk-proj-0123456789abcdefghijklmnop", "correct-horse-battery-staple-42"])
@pytest.mark.parametrize("status", [401, 503])
def test_a_key_echoed_by_the_server_is_redacted_from_errors(echo_server, key, status):
    from casu_dataset.core.llm.backends import BackendError, OpenAIBackend

    echo_server.status = status
    b = OpenAIBackend(
        f"http://127.0.0.1:{echo_server.server_address[1]}/v1", "m", api_key=key, max_retries=1, backoff=0.0
    )
    with pytest.raises(BackendError) as err:
        b.complete([{"role": "user", "content": "hi"}])
    msg = str(err.value)
    assert f"HTTP {status}" in msg and "Incorrect API key provided: [REDACTED]" in msg and key not in msg


def test_the_harness_never_prints_an_echoed_key(echo_server, tmp_path, monkeypatch):
    key = "correct-horse-battery-staple-42"  # not key-shaped: redacted because it is the key
    monkeypatch.setenv("MY_SERVICE_KEY", key)
    ds = tiny_dataset(tmp_path / "ds", 2, "k")
    url = f"http://127.0.0.1:{echo_server.server_address[1]}/v1"
    model_args = f"model=m,base_url={url},api_key_env=MY_SERVICE_KEY,max_retries=0"
    o = harness(*harness_argv(ds, tmp_path / "res", "--model_args", model_args, model="openai-audio"))
    assert o.code in (3, 4) and "HTTP 401" in o.text and "[REDACTED]" in o.text, o.text
    assert key not in o.text
    for f in (tmp_path / "res").rglob("*"):
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f
