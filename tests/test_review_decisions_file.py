"""The review server's decisions file: something other than a regular file in its place (a
folder, a FIFO, a dangling link) is named when the server starts; a full disk during a write cuts
the partial line back off, answers 507 and acknowledges nothing, so the next decision is a whole
line of its own; a JSON body with a key given twice is a named 400."""

import errno
import json
import os
import threading

import pytest
from conftest import fixture_family_rows, write_dataset
from test_review_security import DECISION, good_headers, post

from casu_dataset.review import decisions as decisions_mod
from casu_dataset.review.decisions import DecisionFileError, DecisionLog, decisions_path, load
from casu_dataset.review.server import serve


@pytest.fixture(scope="module")
def rows():
    return fixture_family_rows()


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda p: p.mkdir(), "is a folder"),
        (lambda p: os.mkfifo(p), "not a regular file"),
        (lambda p: p.symlink_to(p.parent / "gone.jsonl"), "dangling symlink"),
        (lambda p: p.symlink_to(p), "decisions.jsonl"),  # a loop: the OS error, the file named
    ],
)
def test_a_decisions_file_that_is_not_a_file_is_named_at_start(rows, tmp_path, make, needle):
    from casu_dataset.cli import main

    ds = write_dataset(rows, tmp_path / "ds")
    make(decisions_path(ds))
    with pytest.raises(DecisionFileError, match=needle) as e:
        serve(ds, "127.0.0.1", 0, "t")
    assert str(decisions_path(ds)) in str(e.value)
    assert main(["review", "--dataset", str(ds), "--port", "0"]) == e.value.exit_code != 0


def test_a_full_disk_cuts_the_half_line_and_acknowledges_nothing(tmp_path, monkeypatch):
    log = DecisionLog(tmp_path / "d.jsonl")
    rec = {"kind": "scene", "item": "a", "action": "accept", "reviewer": "r"}
    log.append(rec)
    real = os.write

    def half_then_full(fd, data):
        if len(data) > 8:
            real(fd, bytes(data[:8]))
            return 8
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(decisions_mod.os, "write", half_then_full)
    with pytest.raises(DecisionFileError, match=r"d.jsonl: the decision was not saved \(No space left"):
        log.append({**rec, "item": "b"})
    monkeypatch.setattr(decisions_mod.os, "write", real)
    log.append({**rec, "item": "c"})
    lines = (tmp_path / "d.jsonl").read_text().splitlines()
    assert [json.loads(x)["item"] for x in lines] == ["a", "c"]
    rv = load(tmp_path / "d.jsonl")
    assert not rv.bad_lines and sorted(rv.final) == [("scene", "a"), ("scene", "c")]


def test_the_server_answers_507_on_a_full_disk_and_400_on_a_doubled_key(rows, tmp_path, monkeypatch):
    ds = write_dataset(rows, tmp_path / "ds")
    srv, data = serve(ds, "127.0.0.1", 0, "tester")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port, token = srv.server_address[1], srv.token
    try:
        h = good_headers(port, token)
        raw = (
            b'{"kind": "scene", "item": "%s", "action": "accept", "action": "reject"}'
            % DECISION["item"].encode()
        )
        code, res = post(port, None, h, raw=raw)
        assert code == 400 and "'action' is given twice" in res["error"]

        def full(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(decisions_mod.os, "write", full)
        code, res = post(port, DECISION, h)
        assert code == 507 and "not saved" in res["error"] and "saved" not in res
        monkeypatch.undo()
        code, res = post(port, DECISION, h)
        assert code == 200
        lines = decisions_path(ds).read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["action"] == "reject"
    finally:
        srv.shutdown()
        srv.server_close()
