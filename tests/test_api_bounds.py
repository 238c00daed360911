"""The OpenAI-compatible client against a hostile-but-honest local server (127.0.0.1, port 0):
every request ends within bounds and fails with one named line.

- a reply trickled a byte at a time (body, or headers) ends at the TOTAL deadline (`timeout`),
  not after it, and is a failed request (retried, then a failed sample);
- a truncated JSON 200 is a "malformed response" naming the server and the sample id;
- 429 with Retry-After: 0 waits at least the floor, growing, and ends at the rate-limit budget
  after a handful of requests; a huge Retry-After is cut to the budget, and said so;
- a gzip bomb (a few KB inflating past 100 MB) stops at `max_response_bytes`, with bounded memory;
- a key in `base_url`'s query is sent on every request but appears in no file of the run, no
  line it prints, and no cache key.

Every server loop is bounded (a stop event, a byte count); every test runs in a few seconds."""

from __future__ import annotations

import copy
import gzip
import json
import pickle
import threading
import time
import tracemalloc
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from conftest import harness_run, tiny_dataset

ANSWER = json.dumps({"choices": [{"message": {"role": "assistant", "content": "A"}}]}).encode()
SECRET = "s3cr3tQueryKey9X"  # not key-shaped: only the URL redaction can catch it


def _bomb(total: int, layers: int) -> bytes:
    """`total` zero bytes, gzip-compressed `layers` times, built in 1 MiB steps (no big buffer)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    data = b"".join(c.compress(block) for _ in range(total >> 20)) + c.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


BOMB = _bomb(200 << 20, 2)  # Content-Encoding: gzip, gzip


class Hostile:
    """One server, one behaviour (`mode`); counts requests and records the paths asked for."""

    def __init__(self, mode: str, retry_after: str = "0"):
        self.mode, self.retry_after = mode, retry_after
        self.stop = threading.Event()
        self.requests = 0
        self.paths: list[str] = []
        self.status = Counter()
        self.lock = threading.Lock()

    def handler(self):
        srv = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code: int, body: bytes, headers=()):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                for k, v in headers:
                    self.send_header(k, v)
                if not any(k == "Content-Length" for k, _ in headers):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self, data: bytes, every: float = 0.1):
                for i in range(len(data)):  # bounded: len(data) steps, and the stop event
                    if srv.stop.wait(every):
                        return
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            def do_POST(self):
                request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with srv.lock:
                    srv.requests += 1
                    srv.paths.append(self.path)
                m = srv.mode
                try:
                    if m == "trickle_body":
                        body = b" " * 200 + ANSWER  # leading blanks: valid JSON, 30 s at 0.1 s a byte
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.flush()
                        self._trickle(body)
                    elif m == "slow_ok":
                        body = b" " * 10 + ANSWER
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.flush()
                        self._trickle(body, every=1.5 / len(body))
                    elif m == "gzip_ok":
                        self._send(200, gzip.compress(ANSWER), [("Content-Encoding", "gzip")])
                    elif m == "deflate_ok":
                        self._send(200, zlib.compress(ANSWER), [("Content-Encoding", "deflate")])
                    elif m == "trickle_headers":
                        head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: y\r\n" % i for i in range(40))
                        self._trickle(head)
                    elif m == "truncated":
                        self._send(200, ANSWER[: len(ANSWER) // 2])
                    elif m == "html":
                        self.send_response(200)
                        self.send_header("Content-Type", "text/html")
                        self.send_header("Content-Length", "13")
                        self.end_headers()
                        self.wfile.write(b"<html>x</html"[:13])
                    elif m == "429":
                        srv.status["429"] += 1
                        self._send(
                            429, b'{"error": {"message": "slow down"}}', [("Retry-After", srv.retry_after)]
                        )
                    elif m == "bomb":
                        self._send(200, BOMB, [("Content-Encoding", "gzip, gzip")])
                    elif m == "huge_length":
                        self._send(200, b"", [("Content-Length", str(10**12))])
                    elif m == "key_in_query":
                        ok = f"api_key={SECRET}" in self.path and self.path.startswith(
                            "/v1/chat/completions?"
                        )
                        srv.status["with_key" if ok else "without"] += 1
                        fail = b"in q 1?" in request  # one question fails: its error carries the URL
                        if ok and not fail:
                            self._send(200, ANSWER)
                        elif ok:
                            self._send(
                                500, json.dumps({"error": {"message": f"boom at {self.path}"}}).encode()
                            )
                        else:
                            self._send(403, b'{"error": {"message": "no key in the query"}}')
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up: what we are testing

        return H

    def __enter__(self) -> str:
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def __exit__(self, *exc):
        self.stop.set()
        self.srv.shutdown()
        self.srv.server_close()


def backend(url: str, **kw):
    from casu_dataset.core.llm.backends import OpenAIBackend

    kw = {"api_key": "", "max_retries": 0, "backoff": 0.05, **kw}
    return OpenAIBackend(url, "m", **kw)


def ask(b) -> tuple[str | Exception, float]:
    from casu_dataset.core.llm.backends import BackendError

    t = time.monotonic()
    try:
        out: str | Exception = b.complete([{"role": "user", "content": "hi"}], max_tokens=4)
    except BackendError as err:
        out = err
    return out, time.monotonic() - t


# -- the total deadline --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["trickle_body", "trickle_headers"])
def test_a_trickled_reply_ends_at_the_total_deadline_and_is_a_failed_request(mode):
    from casu_dataset.core.llm.backends import BackendError

    with Hostile(mode) as url:
        b = backend(url, timeout=1.0, max_retries=1)
        err, secs = ask(b)
    assert isinstance(err, BackendError) and err.transient, err
    msg = str(err)
    assert "\n" not in msg and url in msg and "total deadline, timeout=1 s" in msg and "2 attempts" in msg, (
        msg
    )
    # two attempts of 1 s each and a short backoff; without the deadline: 30 s a reply
    assert secs < 3.5, secs
    assert b.stats["retries"] == 1 and b.stats["failed"] == 1, b.stats


@pytest.mark.parametrize("mode", ["slow_ok", "gzip_ok", "deflate_ok"])
def test_a_reply_within_the_bounds_is_read_whole(mode):
    """The bounds cut nothing that fits: a reply trickled over ~1.5 s under a 6 s deadline, and
    gzip / deflate replies decoded here, are answers."""
    with Hostile(mode) as url:
        b = backend(url, timeout=6.0)
        out, secs = ask(b)
    assert out == "A", out
    assert b.stats["failed"] == 0 and (secs > 1.0 if mode == "slow_ok" else secs < 2), secs


# -- malformed bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["truncated", "html"])
def test_a_malformed_200_is_one_named_line(mode):
    from casu_dataset.core.llm.backends import BackendError

    with Hostile(mode) as url:
        b = backend(url, timeout=5.0, max_retries=3)
        err, secs = ask(b)
    assert isinstance(err, BackendError) and err.transient, repr(err)
    msg = str(err)
    assert msg.startswith(f"{url}: malformed response") and "\n" not in msg, msg
    assert b.stats["requests"] == 1 and b.stats["retries"] == 0  # not retried: the same reply would come


# -- 429 loops ----------------------------------------------------------------------------------


def test_429_with_retry_after_0_waits_a_growing_floor_and_ends_at_the_budget():
    from casu_dataset.core.llm.backends import BackendError

    api = Hostile("429", retry_after="0")
    with api as url:
        b = backend(url, timeout=5.0, rate_limit_wait=2.5, backoff=0.0, max_retries=4)
        err, secs = ask(b)
    assert isinstance(err, BackendError) and err.transient, err
    assert "HTTP 429" in str(err) and "of the 2.5 s rate_limit_wait budget gone" in str(err), err
    # 0.5 s floor, then exponential: a handful of requests, not thousands (7,400 in 200 s before)
    assert 2 <= api.requests <= 6, api.requests
    assert 2.3 <= secs < 4.0, secs


@pytest.mark.parametrize("value", ["99999", "inf", "-5", "nan", "soon", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_an_absurd_retry_after_is_floored_or_cut_to_the_budget_and_said(value, caplog):
    api = Hostile("429", retry_after=value)
    with api as url:
        b = backend(url, timeout=5.0, rate_limit_wait=1.2)
        err, secs = ask(b)
    assert "HTTP 429" in str(err) and secs < 3.0, (err, secs)
    assert 2 <= api.requests <= 4, api.requests
    if value in ("99999", "Wed, 21 Oct 2099 07:28:00 GMT"):  # cut to what is left, and said
        assert "the server asked Retry-After" in str(err) and "cut to the" in str(err), err
        assert any("Retry-After" in r.getMessage() for r in caplog.records)


# -- the size cap -------------------------------------------------------------------------------


def test_a_gzip_bomb_stops_at_the_size_cap_with_bounded_memory():
    from casu_dataset.core.llm.backends import BackendError

    assert len(BOMB) < 16_000  # a few KB on the wire...
    with Hostile("bomb") as url:
        b = backend(url, timeout=10.0, max_response_bytes=1 << 20, max_retries=2)
        tracemalloc.start()
        try:
            err, secs = ask(b)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(err, BackendError) and err.transient, repr(err)
    msg = str(err)
    assert "inflates past the 1 MiB cap (max_response_bytes" in msg and url in msg and "\n" not in msg, msg
    assert peak < 24 << 20, peak  # ...200 MB inflated: never held (a few MiB of steps at most)
    assert secs < 5 and b.stats["retries"] == 0, (secs, b.stats)


def test_a_content_length_over_the_cap_is_refused_before_the_body():
    with Hostile("huge_length") as url:
        err, secs = ask(backend(url, timeout=5.0))
    assert "(Content-Length) over the 16 MiB cap" in str(err) and secs < 2, err


def test_a_bounded_stream_decodes_gzip_and_deflate_exactly():
    """The bounded decoder is a decoder: what fits under the cap comes out byte for byte."""
    from casu_dataset.core.llm.bounded import _inflate

    data = bytes(range(256)) * 4000
    for enc, blob in (
        ("gzip", gzip.compress(data)),
        ("deflate", zlib.compress(data)),
        ("deflate", zlib.compress(data)[2:-4]),  # raw deflate, as some servers send
    ):
        pieces = [blob[i : i + 1000] for i in range(0, len(blob), 1000)]
        assert b"".join(_inflate(iter(pieces), enc)) == data, enc
    zeros = zlib.compress(bytes(10 << 20))  # one chunk inflating 10 MiB: 64 KiB steps
    assert max(len(x) for x in _inflate(iter([zeros]), "deflate")) <= 64 * 1024


# -- keys in the URL ----------------------------------------------------------------------------


def test_url_redaction_masks_userinfo_key_like_params_and_fragments():
    from casu_dataset.core.redact import SecretURL, protect_url, redact, redact_url, reveal

    cases = {
        "http://h/v1?api_key=K1a2b3c4&api-version=2024-06-01": "http://h/v1?api_key=[REDACTED]&api-version=2024-06-01",
        "https://u:pw9Xq2@h:8/v1": "https://[REDACTED]@h:8/v1",
        "http://h/v1?key=abcd1234#access_token=zzzz9999": "http://h/v1?key=[REDACTED]#access_token=[REDACTED]",
        "http://h/v1?X-Amz-Signature=ab12&sig=cd34&monkey=3&token=t0k": (
            "http://h/v1?X-Amz-Signature=[REDACTED]&sig=[REDACTED]&monkey=3&token=[REDACTED]"
        ),
        "http://h/v1?turkey=1&design=2": "http://h/v1?turkey=1&design=2",
    }
    for url, want in cases.items():
        assert redact_url(url) == want
        assert redact(f"error at {url} (boom)") == f"error at {want} (boom)"
    s = protect_url("http://h/v1?api_key=K1a2b3c4")
    assert isinstance(s, SecretURL) and reveal(s).endswith("K1a2b3c4")
    assert "K1a2b3c4" not in f"{s} {s!r} {str(s)} {json.dumps({'u': s})} {s + '/x'} {s.upper()}"
    plain = protect_url("http://h/v1")
    assert plain == "http://h/v1" and not isinstance(plain, SecretURL)
    # copies keep the key (the adapter needs it); anything serialized writes the mask
    assert reveal(copy.deepcopy({"u": s})["u"]).endswith("K1a2b3c4")
    for dumped in (pickle.dumps(s), yaml.safe_dump({"u": s}).encode(), yaml.dump({"u": s}).encode()):
        assert b"K1a2b3c4" not in dumped and b"[REDACTED]" in dumped


def test_the_backend_shows_and_hashes_the_url_masked_but_sends_it_whole():
    from casu_dataset.core.llm.cache import CachedBackend, ResponseCache

    b = backend("http://user:pw-S3cret99@127.0.0.1:9/v1/?api_key=K1a2b3c4&api-version=2&x=1#sig=Z9z9z9z9")
    shown = f"{b.base_url} {b!r} {b.fingerprint}"
    for secret in ("pw-S3cret99", "K1a2b3c4", "Z9z9z9z9"):
        assert secret not in shown, shown
    assert (
        b.base_url == "http://[REDACTED]@127.0.0.1:9/v1?api_key=[REDACTED]&api-version=2&x=1#sig=[REDACTED]"
    )
    # sent: the userinfo in the URL, the query on every request (not glued to the path), no fragment
    assert b._endpoint == "http://user:pw-S3cret99@127.0.0.1:9/v1"
    assert b._query == {"api_key": "K1a2b3c4", "api-version": "2", "x": "1"}
    other_key = backend("http://user:other1@127.0.0.1:9/v1/?api_key=ZZ&api-version=2&x=1#sig=Q")
    assert other_key.fingerprint == b.fingerprint  # the same server: the cache survives a key rotation
    assert CachedBackend(b, ResponseCache(":memory:")).fingerprint == b.fingerprint


def test_a_key_in_the_base_url_query_is_sent_but_never_recorded(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ds = tiny_dataset(tmp_path / "ds", 4, "q")
    out = tmp_path / "res"
    api = Hostile("key_in_query")
    with api as url:
        rc, so, se = harness_run(
            ds,
            out,
            "--model_args",
            f"model=m,base_url={url}?api_key={SECRET}&api-version=1,concurrency=1,max_retries=0",
            "--log_samples",
            "--verbosity",
            "INFO",
            model="openai-audio",
        )
    # sent (at the right path, on every request); one question fails, an HTTP 500 naming the URL
    assert api.status["without"] == 0 and api.status["with_key"] >= 4, (api.status, api.paths)
    assert rc == 4 and "1 sample(s) failed" in so + se and "q_scene1/q0" in so + se, so + se
    assert SECRET not in so + se and "api_key=[REDACTED]" in so + se
    files = [f for f in out.rglob("*") if f.is_file()]
    assert any(f.name.startswith("casu_samples_") for f in files) and any(
        f.suffix == ".sqlite" for f in files
    )
    for f in files:
        assert SECRET.encode() not in f.read_bytes(), f
    doc = json.loads(next(out.rglob("casu_results_*.json")).read_text())
    assert "api_key=[REDACTED]" in json.dumps(doc)  # recorded, masked: the server is still named


def test_a_trickling_server_in_a_run_is_failed_samples_with_one_line_each(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    ds = tiny_dataset(tmp_path / "ds", 2, "t")
    t = time.monotonic()
    with Hostile("trickle_body") as url:
        rc, so, se = harness_run(
            ds,
            tmp_path / "res",
            "--model_args",
            f"model=m,base_url={url},timeout=1,max_retries=0,concurrency=2",
            "--log_samples",
            model="openai-audio",
        )
    secs = time.monotonic() - t
    text = so + se
    assert rc == 4 and "Traceback" not in text, text
    assert "t_scene0/q0" in text and "total deadline, timeout=1 s" in text, text
    assert secs < 15, secs  # two 30 s replies cut at 1 s each, in parallel
    rows = [
        json.loads(line)
        for f in Path(tmp_path / "res").rglob("casu_samples_*.jsonl")
        for line in f.read_text().splitlines()
    ]
    errs = [r.get("error") for r in rows]
    assert len(rows) == 2 and all(e and "total deadline" in e and "sample t_scene" in e for e in errs), errs
