"""The review server refuses cross-site and oversized writes and malformed payloads with named
errors, shows no absolute path, warns on non-loopback binds and reads its decisions log
incrementally."""

from __future__ import annotations

import http.client
import http.server
import json
import re
import socket
import threading
import urllib.request

import pytest
from conftest import fixture_family_rows, write_dataset

from casu_dataset.review.decisions import DecisionLog, decisions_path
from casu_dataset.review.server import MAX_BODY, serve

ITEM = "fx_go_or_stay.stay.phone"  # a variant scene of the fixture families


@pytest.fixture(scope="module")
def rows():
    return fixture_family_rows()


@pytest.fixture
def served(rows, tmp_path):
    ds = write_dataset(rows, tmp_path / "ds")
    srv, data = serve(ds, "127.0.0.1", 0, "tester")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield ds, srv.server_address[1], srv.token
    srv.shutdown()
    srv.server_close()


def page_token(port: int) -> str:
    html = urllib.request.urlopen(f"http://127.0.0.1:{port}/").read().decode()
    return re.search(r'<meta name="casu-token" content="([^"]+)">', html).group(1)


def post(port, body, headers=None, raw: bytes | None = None):
    """POST /api/decision with exact headers (http.client sets only Host and Content-Length)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = raw if raw is not None else json.dumps(body).encode()
    c.putrequest("POST", "/api/decision", skip_host=True)
    h = {"Host": f"127.0.0.1:{port}", "Content-Length": str(len(data)), **(headers or {})}
    for k, v in h.items():
        if v is not None:
            c.putheader(k, v)
    c.endheaders()
    c.send(data)
    r = c.getresponse()
    out = r.status, json.loads(r.read() or b"{}")
    c.close()
    return out


def good_headers(port, token):
    return {"Content-Type": "application/json", "X-CASU-Token": token, "Origin": f"http://127.0.0.1:{port}"}


DECISION = {"kind": "scene", "item": ITEM, "action": "reject", "reviewer": "ann"}


def test_the_page_carries_a_token_and_a_same_origin_write_with_it_is_saved(served):
    ds, port, token = served
    assert page_token(port) == token and len(token) >= 32
    code, res = post(port, DECISION, good_headers(port, token))
    assert code == 200 and res["saved"]["item"] == ITEM
    assert len(decisions_path(ds).read_text().splitlines()) == 1
    # curl-like clients send no Origin: the token and Host still decide
    h = good_headers(port, token)
    h.pop("Origin")
    assert post(port, DECISION, h)[0] == 200


@pytest.mark.parametrize(
    "change, code, needle",
    [
        # a form-style cross-site POST from another site, via a DNS-rebinding name
        (
            {
                "Content-Type": "text/plain",
                "Origin": "http://evil.example",
                "Host": "evil.example:80",
                "X-CASU-Token": None,
            },
            403,
            "Host 'evil.example:80'",
        ),
        ({"Origin": "http://evil.example"}, 403, "Origin 'http://evil.example'"),
        ({"Origin": "null"}, 403, "Origin 'null'"),
        ({"Origin": "http://127.0.0.1:1"}, 403, "Origin"),  # another port is another origin
        ({"Host": "rebind.attacker.example:{port}"}, 403, "DNS rebinding"),
        ({"Sec-Fetch-Site": "cross-site"}, 403, "Sec-Fetch-Site"),
        ({"X-CASU-Token": None}, 403, "X-CASU-Token"),
        ({"X-CASU-Token": "guess"}, 403, "X-CASU-Token"),
        ({"Content-Type": "text/plain"}, 415, "application/json"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),
        ({"Content-Type": None}, 415, "application/json"),
    ],
)
def test_cross_site_and_tokenless_writes_are_refused(served, change, code, needle):
    ds, port, token = served
    h = good_headers(port, token)
    h.update({k: (v.format(port=port) if isinstance(v, str) else v) for k, v in change.items()})
    got, res = post(port, DECISION, h)
    assert got == code and needle in res["error"], res
    assert not decisions_path(ds).exists()  # nothing was stored


def raw_request(port, head: str) -> tuple[int, dict]:
    """Send only a request head (no body) and read the reply: the server must answer without
    waiting for, or reading, the announced body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode())
        buf = b""
        while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < int(
            re.search(rb"Content-Length: (\d+)", buf).group(1)
        ):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    status = int(buf.split(b" ", 2)[1])
    return status, json.loads(buf.split(b"\r\n\r\n", 1)[1])


@pytest.mark.parametrize(
    "length, code, needle",
    [
        (str(MAX_BODY + 1), 413, "at most"),
        (str(100 * 2**20), 413, "at most"),  # a 100 MB body
        ("1000000000000", 413, "at most"),  # 1e12 bytes: refused, never allocated
        ("1e12", 400, "Content-Length '1e12'"),
        ("-5", 400, "Content-Length '-5'"),
        (None, 411, "Content-Length is required"),
    ],
)
def test_oversized_or_unsized_bodies_are_refused_before_reading(served, length, code, needle):
    ds, port, token = served
    head = (
        f"POST /api/decision HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"X-CASU-Token: {token}\r\n" + (f"Content-Length: {length}\r\n" if length else "") + "\r\n"
    )
    got, res = raw_request(port, head)
    assert got == code and needle in res["error"], res
    assert post(port, DECISION, good_headers(port, token))[0] == 200  # the server is still up


@pytest.mark.parametrize(
    "raw, needle",
    [
        (b'["A"]', "a decision must be a JSON object, got list"),
        (b'"accept"', "a decision must be a JSON object, got str"),
        (b"42", "got int"),
        (b"null", "got NoneType"),
        (b"{not json", "body: not JSON"),
        (b"\xff\xfe{}", "body: not JSON"),
        (b"[" * 100000 + b"]" * 100000, "body: not JSON"),  # nesting past the parser's depth
        (json.dumps({**DECISION, "item": [ITEM]}).encode(), "field 'item': must be a string, got list"),
        (json.dumps({**DECISION, "kind": {"a": 1}}).encode(), "field 'kind': must be a string"),
        (json.dumps({**DECISION, "comment": ["x"]}).encode(), "field 'comment': must be a string"),
        (
            json.dumps({**DECISION, "edit": {"question": "x"}}).encode(),
            "field 'edit' given with action 'reject'",
        ),
        (
            json.dumps(
                {
                    "kind": "family_question",
                    "item": "fx_go_or_stay/contextual_reasoning",
                    "action": "edit",
                    "edit": "str",
                }
            ).encode(),
            "field 'edit': must be an object",
        ),
        (
            json.dumps({"kind": "question", "item": "nope/q", "action": "accept"}).encode(),
            "is not in this dataset",
        ),
    ],
)
def test_malformed_payloads_get_a_named_400_and_no_traceback(served, capfd, raw, needle):
    ds, port, token = served
    got, res = post(port, None, good_headers(port, token), raw=raw)
    assert got == 400 and needle in res["error"], res
    assert "Traceback" not in capfd.readouterr().err
    assert not decisions_path(ds).exists()


def test_state_shows_no_absolute_path_and_lists_unknown_and_bad_lines(served, tmp_path):
    ds, port, token = served
    f = decisions_path(ds)
    lines = [
        {
            "time": "2026-01-01T10:00:00+00:00",
            "reviewer": "ann",
            "kind": "scene",
            "item": ITEM,
            "action": "accept",
        },
        # a bad line: listed as a warning by line number, never a crash of the state view
        {"time": 5, "reviewer": "ann", "kind": "scene", "item": ITEM, "action": "reject"},
        {
            "time": "2026-01-01T10:00:01+00:00",
            "reviewer": "ann",
            "kind": "question",
            "item": "gone/q",
            "action": "reject",
        },
    ]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state").read().decode()
    state = json.loads(body)
    assert (
        str(tmp_path) not in body
        and str(ds) not in body
        and "/" not in state["dataset"] + state["decisions_file"]
    )
    assert state["counts"] == {
        "reviewed": 1,
        "accepted": 1,
        "edited": 0,
        "rejected": 0,
    }  # the unknown one is not
    assert any("line 2" in w and "field 'time'" in w for w in state["warnings"])
    assert any("question gone/q" in w and "not counted" in w for w in state["warnings"])
    fam = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/family/fx_go_or_stay").read())
    assert fam["variants"][3]["status"] == "accept"
    # GETs under a foreign Host (a DNS-rebinding page reading the data) are refused too
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/api/state", headers={"Host": "rebind.attacker.example"})
    assert c.getresponse().status == 403


def test_a_non_loopback_bind_warns_loudly_and_loopback_does_not(rows, tmp_path, caplog):
    ds = write_dataset(rows, tmp_path / "ds")
    srv, _ = serve(ds, "127.0.0.1", 0, "t")
    srv.server_close()
    assert not caplog.records
    srv, _ = serve(ds, "0.0.0.0", 0, "t")
    srv.server_close()
    (rec,) = caplog.records  # a logged warning: `python -m casu_dataset review` shows it on stderr
    err = rec.getMessage()
    assert rec.levelname == "WARNING" and "WARNING" in err and "0.0.0.0" in err and "127.0.0.1" in err


def test_the_decisions_log_is_parsed_incrementally(tmp_path):
    f = tmp_path / "d.jsonl"
    rec = {"time": "2026-01-01T10:00:00+00:00", "reviewer": "ann", "kind": "question", "action": "accept"}
    f.write_text("".join(json.dumps({**rec, "item": f"s/q{i}"}) + "\n" for i in range(3000)))
    log = DecisionLog(f)
    assert log.review().counts()["reviewed"] == 3000 and log.parsed_lines == 3000
    for _ in range(5):  # the page asks for the state after every decision
        log.review()
    assert log.parsed_lines == 3000
    log.append({**rec, "item": "s/q1", "action": "reject", "time": "2026-01-01T11:00:00+00:00"})
    rv = log.review()
    assert log.parsed_lines == 3001 and rv.status("question", "s/q1") == "reject"
    with open(f, "a") as fh:  # a line still being written: reported, and parsed once complete
        fh.write(json.dumps({**rec, "item": "s/new"})[:20])
    assert log.review().bad_lines and log.parsed_lines == 3001
    with open(f, "a") as fh:
        fh.write(json.dumps({**rec, "item": "s/new"})[20:] + "\n")
    rv = log.review()
    assert rv.status("question", "s/new") == "accept" and not rv.bad_lines and log.parsed_lines == 3002
    f.write_text(json.dumps({**rec, "item": "only"}) + "\n")  # replaced (shorter): read again from the start
    rv = log.review()
    assert list(rv.final) == [("question", "only")]


# -- the link the command prints -------------------------------------------------------------


def _start_review(ds, tmp_path, tty: bool):
    """`python -m casu_dataset review` in a subprocess, its stdout a pipe or a terminal (pty);
    returns (process, stdout fd, what it printed up to its `open` line)."""
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    if tty:
        read_fd, write_fd = pty.openpty()
    else:
        read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "casu_dataset", "review", "--dataset", str(ds), "--port", "0"],
        stdout=write_fd,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    os.close(write_fd)
    out, t0 = b"", time.time()
    while b"open http" not in out or not out.rstrip(b" ").endswith((b"\n", b"\r")):
        if time.time() - t0 > 60 or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"no link printed: {out!r} {proc.stderr.read()!r}")
        if select.select([read_fd], [], [], 0.5)[0]:
            out += os.read(read_fd, 4096)
    return proc, read_fd, out.decode()


@pytest.mark.parametrize("tty", [False, True], ids=["stdout-redirected", "stdout-a-terminal"])
def test_the_printed_link_opens_the_page_and_is_on_stdout_only(rows, tmp_path, tty):
    """The `open` line is a link that works as printed (the page, and a decision saved through
    it), on stdout whether or not it is a terminal; stderr, the decisions file and anything else
    written under the run's folders never hold the link or the page's token."""
    import os
    import signal
    import subprocess

    ds = write_dataset(rows, tmp_path / "ds")
    proc, fd, out = _start_review(ds, tmp_path, tty)
    try:
        url = re.search(r"open (http://\S+)", out).group(1)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), out
        with urllib.request.urlopen(url) as r:
            assert r.status == 200 and "text/html" in r.headers["Content-Type"]
            token = re.search(r'<meta name="casu-token" content="([^"]+)">', r.read().decode()).group(1)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        assert post(port, DECISION, good_headers(port, token))[0] == 200
        proc.send_signal(signal.SIGINT)  # Ctrl+C: a clean stop
        # communicate() drains stderr while waiting: a child blocked on a full pipe cannot stop.
        try:
            err = proc.communicate(timeout=30)[1].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            tail = proc.communicate()[1].decode()[-3000:]
            raise AssertionError(f"review did not stop within 30 s of Ctrl+C; its stderr:\n{tail}") from None
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(fd)
    assert "Traceback" not in err and url not in err and token not in err, err
    assert decisions_path(ds).exists()
    for f in tmp_path.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert url.encode() not in data and token.encode() not in data, f


def test_the_link_is_printed_not_logged(rows, tmp_path, monkeypatch, caplog):
    """The link goes to stdout with print(), never through logging: a log handler (a file, the
    console's redaction of secrets) never holds or rewrites it."""
    import logging

    from conftest import call_main

    from casu_dataset.cli import main
    from casu_dataset.review.server import ReviewServer

    def stop(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ReviewServer, "serve_forever", stop)
    ds = write_dataset(rows, tmp_path / "ds")
    with caplog.at_level(logging.DEBUG):
        rc, out, err = call_main(main, ["review", "--dataset", str(ds), "--port", "0"])
    url = re.search(r"open (http://\S+)", out).group(1)
    assert rc == 0 and url not in err
    assert not [r for r in caplog.records if "http://" in r.getMessage()], caplog.records
