"""Issue 24: bad inputs, round 2. The classes a fresh corpus found (tracebacks, silent wrong
results, unnamed errors, review edits that move keys, key fragments in output, a killed run's
logs beside the rerun's) and more of each class. Same rules as tests/test_bad_inputs.py: each
case ends in a named error (exit code + needles naming the file, field or flag), a counted
skip, or the right result; a failure message starts with TRACEBACK, SILENT or UNNAMED.

`test_before_after_table` prints the table of verdicts: BEFORE was measured by running these
same cases against the tree before this issue (commit fea1b64: `git archive fea1b64` into a
temp folder, this file and its helpers copied in, `pytest -q tests/test_bad_inputs_2.py` with
that tree first on sys.path); AFTER is computed now."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from test_bad_inputs import (
    OK,
    Ctx,
    E,
    Outcome,
    _classify,
    casu,
    expect_error,
    harness,
    write_task,
)
from test_harness_integrity import tiny_dataset

ROOT = Path(__file__).resolve().parents[1]
ROLE = "role_inference"
SHARD = f"{ROLE}/test-00000-of-00001.parquet"
FAMILY_FILE = ROOT / "casu_dataset" / "scenarios" / "casu_mini_v2"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Ctx:
    root = tmp_path_factory.mktemp("bad_inputs_2")
    c = Ctx(root, tiny_dataset(root / "ds", 4, "b"))
    c.tmp = root
    assert c.run().code == 0, c.run().text
    return c


# -- datasets with one thing wrong ------------------------------------------------------------


def table_edit(c: Ctx, name: str, fn, n: int = 3) -> Path:
    """A tiny dataset whose role_inference table went through `fn(table) -> table`."""
    d = tiny_dataset(c.tmp / name, n, name)
    f = d / SHARD
    pq.write_table(fn(pq.read_table(f)), f)
    return d


def setcol(name: str, values, typ=None):
    def fn(t):
        arr = pa.array(values(t) if callable(values) else values, type=typ)
        return t.set_column(t.column_names.index(name), name, arr)

    return fn


def run_on(c: Ctx, d: Path, *argv) -> Outcome:
    return c.run(*argv, ds=d)


def ds_case(name, fn, *needles, n=3):
    return (f"dataset-{name}", lambda c: run_on(c, table_edit(c, name, fn, n)), (E, 2, ROLE, *needles))


def second_shard(c: Ctx, name: str, fn) -> Path:
    """A config of two shards, the second one changed by fn."""
    d = tiny_dataset(c.tmp / name, 3, name)
    f = d / SHARD
    t = pq.read_table(f)
    pq.write_table(t.slice(0, 2), d / ROLE / "test-00000-of-00002.parquet")
    pq.write_table(fn(t.slice(2, 1)), d / ROLE / "test-00001-of-00002.parquet")
    f.unlink()
    return d


def card_case(c: Ctx, kind: str) -> Outcome:
    d = tiny_dataset(c.tmp / kind, 2, kind)
    card = d / "README.md"
    if kind == "card-latin1":
        card.write_bytes(card.read_text().replace("# tiny", "# caf\xe9 tiny").encode("latin-1"))
    elif kind == "card-utf16":
        card.write_bytes(card.read_text().encode("utf-16"))
    elif kind == "card-parent-glob":
        (c.tmp / "outside").mkdir(exist_ok=True)
        shutil.copy(d / SHARD, c.tmp / "outside" / "test-x.parquet")
        card.write_text(card.read_text().replace(f"path: {ROLE}/*.parquet", "path: ../outside/*.parquet"))
    elif kind == "card-absolute-glob":
        card.write_text(card.read_text().replace(f"path: {ROLE}/*.parquet", f"path: {d / ROLE}/*.parquet"))
    elif kind == "config-link-outside":
        (c.tmp / "elsewhere").mkdir(exist_ok=True)
        target = c.tmp / "elsewhere" / "test-00000-of-00001.parquet"
        (d / SHARD).rename(target)
        (d / SHARD).symlink_to(target)
    return run_on(c, d)


def truncated(c: Ctx, name: str, keep: int = 100) -> Path:
    d = tiny_dataset(c.tmp / name, 2, name)
    for f in d.rglob("*.parquet"):
        f.write_bytes(f.read_bytes()[:keep])
    return d


def task_yaml_case(c: Ctx, **edit) -> Outcome:
    (c.tmp / "outer" / ROLE).mkdir(parents=True, exist_ok=True)
    return c.run("--include_path", str(write_task(c.tmp / "tasks", **edit)), tasks="my_role")


def validate_case(c: Ctx, d: Path) -> Outcome:
    return harness("validate", str(ROOT / "tasks" / f"{ROLE}.yaml"), "--dataset", str(d))


# -- casu_dataset build inputs ------------------------------------------------------------------


def bank_manifest(c: Ctx, reject_type: str | None = None, reject_n: int = 0) -> Path:
    """The embedded bank as a manifest with absolute paths; clips of `reject_type` (or the first
    `reject_n` clips) point to a silent file, so the catalog rejects them when it loads."""
    from casu_dataset.core.audio_io import write_wav
    from casu_dataset.sounds.bank import bank_dir

    m = json.loads((bank_dir() / "manifest.json").read_text())
    silent = c.tmp / "silent.wav"
    write_wav(silent, np.zeros(32000, np.float32), 16000)
    n = 0
    for clip in m["clips"]:
        clip["file"] = str((bank_dir() / clip["file"]).resolve())
        if (reject_type and clip.get("type") == reject_type) or n < reject_n:
            clip["file"] = str(silent)
            n += 1
    out = c.tmp / "manifest.json"
    out.write_text(json.dumps(m))
    return out


def family_file(c: Ctx, fill_type: str | None = None) -> tuple[Path, str]:
    """One shipped family (its first), optionally with its first fill's type changed."""
    src = sorted(FAMILY_FILE.glob("*.yaml"))[0]
    fam = yaml.safe_load(src.read_text())[0]
    first = next(iter(fam["fills"].values()))
    old = first["type"]
    if fill_type:
        first["type"] = fill_type
    f = c.tmp / "fam.yaml"
    f.write_text(yaml.safe_dump([fam], sort_keys=False))
    return f, old


def build(c: Ctx, *argv) -> Outcome:
    return casu("build", "--out", str(c.tmp / "built"), "--no-check-speech", *argv)


def catalog_case(c: Ctx, kind: str) -> Outcome:
    if kind == "missing":
        spec = str(c.tmp / "nope.json")
    elif kind == "missing-audio":
        m = c.tmp / "m.json"
        m.write_text(
            json.dumps(
                {
                    "clips": [
                        {
                            "id": "x",
                            "kind": "event",
                            "caption": "a bell",
                            "keywords": ["bell"],
                            "file": "no_such.wav",
                        }
                    ]
                }
            )
        )
        spec = str(m)
    elif kind == "truncated":
        (c.tmp / "m.json").write_text('{"clips": [{"id": "x", "kind": ')
        spec = str(c.tmp / "m.json")
    elif kind == "list":
        (c.tmp / "m.json").write_text("[1, 2]")
        spec = str(c.tmp / "m.json")
    elif kind == "latin1":
        (c.tmp / "m.json").write_bytes('{"name": "caf\xe9", "clips": []}'.encode("latin-1"))
        spec = str(c.tmp / "m.json")
    elif kind == "empty":
        (c.tmp / "m.json").write_text('{"clips": []}')
        spec = str(c.tmp / "m.json")
    elif kind == "all-rejected":
        spec = str(bank_manifest(c, reject_n=10**6))
    elif kind == "clotho-spec":
        spec = "clotho:only_one_part"
    elif kind == "clotho-no-csv":
        (c.tmp / "audio").mkdir()
        spec = f"clotho:{c.tmp / 'nope.csv'}:{c.tmp / 'audio'}"
    elif kind == "clotho-no-audio-dir":
        (c.tmp / "cap.csv").write_text(
            "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\na.wav,x,y,z,w,v\n"
        )
        spec = f"clotho:{c.tmp / 'cap.csv'}:{c.tmp / 'no_audio_here'}"
    elif kind == "fsd-missing-column":
        (c.tmp / "audio").mkdir()
        (c.tmp / "dev.csv").write_text("fname,other\n1,x\n")
        spec = f"fsd50k:{c.tmp / 'dev.csv'}:{c.tmp / 'audio'}"
    else:
        raise ValueError(kind)
    return build(c, "--catalog", spec)


def scenarios_non_utf8(c: Ctx, family: bool) -> Outcome:
    f, _ = family_file(c)
    text = f.read_text() if family else "- id: x\n  place: caf\xe9\n"
    f.write_bytes((text + "# caf\xe9\n").encode("latin-1"))
    return build(c, "--scenarios", str(f))


def out_case(c: Ctx, kind: str, cmd: str = "build") -> Outcome:
    if kind == "under-file":
        (c.tmp / "f").write_text("x")
        out = c.tmp / "f" / "sub"
    elif kind == "proc":
        out = Path("/proc/casu_out")
    elif kind == "loop":
        (c.tmp / "a").symlink_to(c.tmp / "b")
        (c.tmp / "b").symlink_to(c.tmp / "a")
        out = c.tmp / "a"
    elif kind == "dangling":
        (c.tmp / "d").symlink_to(c.tmp / "nowhere" / "x")
        out = c.tmp / "d"
    else:
        raise ValueError(kind)
    if cmd == "compose":
        return casu(
            "compose", str(ROOT / "casu_dataset/scenarios/examples/cafe_order.yaml"), "--out", str(out)
        )
    if cmd == "merge":
        return casu("merge", "--out", str(out), str(c.tmp))
    return casu("build", "--out", str(out))


def fill_type_case(c: Ctx) -> Outcome:
    f, _ = family_file(c, "no_such_bank_type")
    return build(c, "--scenarios", str(f))


def rejected_intended_case(c: Ctx) -> Outcome:
    f, old = family_file(c)
    return build(c, "--scenarios", str(f), "--catalog", str(bank_manifest(c, reject_type=old)))


def rejected_counted(c: Ctx) -> Outcome:
    """8 rejected clips are in build_report.json's settings and in the card text."""
    from casu_dataset.dataset.build import build_settings
    from casu_dataset.mix.realize import make_builder
    from casu_dataset.sounds.preflight import rejected_text

    b = make_builder(
        {
            "catalogs": [str(bank_manifest(c, reject_n=8))],
            "check_speech": False,
            "duration": None,
            "cache": str(c.tmp / "cache"),
        }
    )
    st = build_settings(b, 0, "x")
    n = st["catalog_rejected"]["rejected"]
    text = rejected_text(st["catalog_rejected"])
    ok = n == 8 and "Catalog clips rejected: 8" in text and text.count("silent") >= 8
    return Outcome(0 if ok else 1, f"{n} rejected; card: {text[:300]}")


def review_truncated(c: Ctx, which: str) -> Outcome:
    d = tiny_dataset(c.tmp / "rv", 2, "rv")
    victim = next((d / which).glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:64])
    return casu("review", "--dataset", str(d), "--port", "0")


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


def killed_run_logs(c: Ctx) -> Outcome:
    """A killed run wrote its sample log but not its results JSON; the rerun's folder shows only
    complete runs' logs, and the orphan is kept under incomplete/."""
    out = c.tmp / "res"
    assert c.run("--log_samples").code == 0
    d = next(out.glob("*/"))
    orphan = d / "samples_role_inference_2020-01-01T00-00-00.jsonl"
    orphan.write_text(next(d.glob("samples_*.jsonl")).read_text())
    o = c.run("--log_samples")
    logs = sorted(p.name for p in d.glob("samples_*.jsonl"))
    runs = sorted(d.glob("results_*.json"))
    ok = (
        o.code == 0
        and len(logs) == len(runs) == 2
        and orphan.name not in logs
        and (d / "incomplete" / orphan.name).is_file()
    )
    return Outcome(0 if ok else 1, f"logs {logs}, runs {[r.name for r in runs]}; {o.text[-300:]}")


def load_case(c: Ctx, d: Path) -> Outcome:
    """casu_dataset.load, the notebook reader: a LoadError naming the problem, never a wrong item."""
    from casu_dataset.dataset.loading import LoadError, load

    return expect_error(lambda: load(d, ROLE), LoadError)


def scenes_case(c: Ctx, kind: str) -> Outcome:
    """The stems the layer conditions render from, checked before inference (CasuData.check_scenes)."""
    from casu_dataset.core.audio_io import encode_flac
    from harness.run.data import CasuData, LoadError

    d = tiny_dataset(c.tmp / "sc", 2, "sc")
    from casu_dataset.contract import ANNOTATION_FORMAT, SUPPORTED_ANNOTATION_VERSIONS

    flac = {"bytes": encode_flac(np.zeros(1600, np.float32)), "path": "x.flac"}

    def ann(sid):
        return json.dumps(
            {
                "format": ANNOTATION_FORMAT,
                "version": max(SUPPORTED_ANNOTATION_VERSIONS),
                "scene_id": sid,
                "sample_rate": 16000,
                "num_samples": 1600,
                "plan": {"turns": [], "events": []},
                "script": {"events": []},
            }
        )

    rows = [
        {
            "scene_id": f"sc_scene{i}",
            "background": flac,
            "speech": flac,
            "events": flac,
            "annotation": ann(f"sc_scene{i}"),
        }
        for i in range(2)
    ]
    if kind == "null-stem":
        rows[1]["speech"] = None
    elif kind == "missing-scene":
        rows = rows[:1]
    elif kind == "duplicate-scene":
        rows = [rows[0], dict(rows[0])]
    elif kind == "bad-annotation":
        rows[1]["annotation"] = "{}"
    f = d / "scenes" / "test-00000-of-00001.parquet"
    if kind == "stems-as-text":
        pq.write_table(pa.Table.from_pylist([dict(r, speech="s.flac") for r in rows]), f)
    else:
        pq.write_table(pa.Table.from_pylist(rows), f)
    data = CasuData(d)
    return expect_error(lambda: data.check_scenes(data.samples(ROLE)), LoadError)


def options_null_element(t):
    opts = [["w", None, "y", "z"]] + [["w", "x", "y", "z"]] * (len(t) - 1)
    return t.set_column(t.column_names.index("options"), "options", pa.array(opts, pa.list_(pa.string())))


CASES = [
    # -- the harness reads a built dataset: schema checked before anything runs
    ds_case(
        "options-one-string", setcol("options", lambda t: ["wxyz"] * len(t)), "options", "list of strings"
    ),
    ds_case(
        "options-ints", setcol("options", lambda t: [[1, 2, 3, 4]] * len(t)), "options", "list of strings"
    ),
    ds_case(
        "options-empty-list", setcol("options", lambda t: [[]] * len(t), pa.list_(pa.string())), "0 option"
    ),
    ds_case("options-null-element", options_null_element, "options", "null or empty"),
    ds_case("answer-int", setcol("answer", lambda t: [0] * len(t)), "answer", "int64"),
    ds_case("answer-all-null", setcol("answer", lambda t: [None] * len(t), pa.null()), "answer", "null"),
    ds_case(
        "answer-one-null",
        setcol("answer", lambda t: [None] + ["A"] * (len(t) - 1), pa.string()),
        "row 0",
        "answer",
    ),
    ds_case("answer-lowercase", setcol("answer", lambda t: ["a"] * len(t)), "answer 'a'"),
    ds_case("question-int", setcol("question", lambda t: list(range(len(t)))), "question", "int64"),
    ds_case(
        "question-null",
        setcol("question", lambda t: [None] + ["q?"] * (len(t) - 1), pa.string()),
        "question",
        "empty",
    ),
    ds_case("id-duplicate", setcol("id", lambda t: ["same"] * len(t)), "id 'same' given twice"),
    ds_case(
        "id-null",
        setcol("id", lambda t: [None] + [f"x{i}" for i in range(1, len(t))], pa.string()),
        "row 0: id is None",
    ),
    ds_case(
        "id-empty", setcol("id", lambda t: [""] + [f"x{i}" for i in range(1, len(t))]), "row 0: id is ''"
    ),
    ds_case("id-int", setcol("id", lambda t: list(range(len(t)))), "column 'id'", "int64"),
    ds_case("scene-id-null", setcol("scene_id", lambda t: [None] * len(t), pa.string()), "scene_id"),
    ds_case(
        "audio-one-null",
        lambda t: t.set_column(
            t.column_names.index("audio"),
            "audio",
            pa.array([None] + t.column("audio").to_pylist()[1:], t.schema.field("audio").type),
        ),
        "audio",
    ),
    ds_case("audio-all-null", setcol("audio", lambda t: [None] * len(t), pa.null()), "audio", "null"),
    ds_case("audio-as-string", setcol("audio", lambda t: ["s.flac"] * len(t)), "audio", "string"),
    ds_case(
        "audio-no-bytes",
        lambda t: t.set_column(
            t.column_names.index("audio"), "audio", pa.array([{"bytes": b"", "path": "x"}] * len(t))
        ),
        "audio",
        "no bytes",
    ),
    ds_case("empty-table", lambda t: t.slice(0, 0), "has no rows", "would evaluate nothing"),
    (
        "dataset-shard-extra-column",
        lambda c: run_on(c, second_shard(c, "sx", lambda t: t.append_column("colour", pa.array(["red"])))),
        (E, 2, "another schema", "colour"),
    ),
    (
        "dataset-shard-missing-column",
        lambda c: run_on(c, second_shard(c, "sm", lambda t: t.drop_columns(["audio"]))),
        (E, 2, "another schema", "audio"),
    ),
    (
        "dataset-shard-options-string",
        lambda c: run_on(c, second_shard(c, "so", setcol("options", ["wxyz"]))),
        (E, 2, "another schema", "options"),
    ),
    ("dataset-card-latin1", lambda c: card_case(c, "card-latin1"), (E, 2, "README.md", "not UTF-8")),
    ("dataset-card-utf16", lambda c: card_case(c, "card-utf16"), (E, 2, "README.md", "not UTF-8")),
    ("dataset-card-parent-glob", lambda c: card_case(c, "card-parent-glob"), (E, 2, "../outside", "outside")),
    ("dataset-card-absolute-glob", lambda c: card_case(c, "card-absolute-glob"), (E, 2, "outside")),
    (
        "dataset-config-link-outside",
        lambda c: card_case(c, "config-link-outside"),
        (E, 2, SHARD, "outside the dataset folder"),
    ),
    (
        "dataset-truncated-parquet",
        lambda c: run_on(c, truncated(c, "tr")),
        (E, 2, SHARD, "not a readable parquet"),
    ),
    (
        "dataset-empty-parquet-file",
        lambda c: run_on(c, truncated(c, "z", 0)),
        (E, 2, SHARD, "not a readable"),
    ),
    (
        "validate-options-one-string",
        lambda c: validate_case(c, table_edit(c, "vo", setcol("options", lambda t: ["wxyz"] * len(t)))),
        (E, 2, "options", "list of strings"),
    ),
    (
        "validate-duplicate-ids",
        lambda c: validate_case(c, table_edit(c, "vd", setcol("id", lambda t: ["s"] * len(t)))),
        (E, 2, "given twice"),
    ),
    (
        "validate-empty-table",
        lambda c: validate_case(c, table_edit(c, "ve", lambda t: t.slice(0, 0))),
        (E, 2, "has no rows"),
    ),
    (
        "limit-run-duplicate-ids",
        lambda c: run_on(c, table_edit(c, "ld", setcol("id", lambda t: ["s"] * len(t))), "--limit", "1"),
        (E, 2, "given twice"),
    ),
    # -- the stems the layer conditions (--conditions all) render from
    ("scenes-null-stem", lambda c: scenes_case(c, "null-stem"), (E, 2, "'scenes'", "sc_scene1", "speech")),
    ("scenes-missing-scene", lambda c: scenes_case(c, "missing-scene"), (E, 2, "'scenes'", "sc_scene1")),
    (
        "scenes-duplicate-scene",
        lambda c: scenes_case(c, "duplicate-scene"),
        (E, 2, "'scenes'", "given twice"),
    ),
    (
        "scenes-bad-annotation",
        lambda c: scenes_case(c, "bad-annotation"),
        (E, 2, "'scenes'", "sc_scene1", "annotation"),
    ),
    (
        "scenes-stems-as-text",
        lambda c: scenes_case(c, "stems-as-text"),
        (E, 2, "'scenes'", "speech", "string"),
    ),
    # -- casu_dataset.load reads the same folders with the same checks
    (
        "load-options-one-string",
        lambda c: load_case(c, table_edit(c, "lo", setcol("options", lambda t: ["wxyz"] * len(t)))),
        (E, 2, "options", "list of strings"),
    ),
    (
        "load-answer-int",
        lambda c: load_case(c, table_edit(c, "la", setcol("answer", lambda t: [1] * len(t)))),
        (E, 2, "answer", "int64"),
    ),
    (
        "load-duplicate-ids",
        lambda c: load_case(c, table_edit(c, "li", setcol("id", lambda t: ["s"] * len(t)))),
        (E, 2, "given twice"),
    ),
    (
        "load-truncated-parquet",
        lambda c: load_case(c, truncated(c, "lt")),
        (E, 2, SHARD, "not a readable parquet"),
    ),
    (
        "load-card-latin1",
        lambda c: (
            lambda d: (
                (d / "README.md").write_bytes(
                    (d / "README.md").read_text().replace("# tiny", "# caf\xe9").encode("latin-1")
                )
                and load_case(c, d)
            )
        )(tiny_dataset(c.tmp / "lc", 2, "lc")),
        (E, 2, "README.md", "not UTF-8"),
    ),
    (
        "load-card-parent-glob",
        lambda c: (
            lambda d: (
                (d / "README.md").write_text(
                    (d / "README.md").read_text().replace(f"path: {ROLE}/*.parquet", "path: ../*/*.parquet")
                )
                and load_case(c, d)
            )
        )(tiny_dataset(c.tmp / "lg", 2, "lg")),
        (E, 2, "../*/*.parquet", "outside"),
    ),
    # -- task YAMLs: a config path never leaves the dataset folder
    (
        "task-dataset-config-dotdot",
        lambda c: task_yaml_case(c, dataset_config=".."),
        (E, 2, "my_role.yaml", "dataset_config"),
    ),
    ("task-dataset-config-dot", lambda c: task_yaml_case(c, dataset_config="."), (E, 2, "dataset_config")),
    (
        "task-dataset-config-slash",
        lambda c: task_yaml_case(c, dataset_config="../outer/role_inference"),
        (E, 2, "dataset_config"),
    ),
    (
        "task-dataset-config-hidden",
        lambda c: task_yaml_case(c, dataset_config=".git"),
        (E, 2, "dataset_config"),
    ),
    ("task-split-dotdot", lambda c: task_yaml_case(c, split=".."), (E, 2, "my_role.yaml", "split")),
    (
        "model-args-rate-limit-wait-nan",
        lambda c: c.run("--model_args", "model=m,rate_limit_wait=nan", model="openai-audio"),
        (E, 2, "rate_limit_wait"),
    ),
    (
        "dataset-eleven-options",
        lambda c: run_on(
            c, table_edit(c, "e11", setcol("options", lambda t: [[f"o{i}" for i in range(11)]] * len(t)))
        ),
        (E, 2, "11 option(s)"),
    ),
    (
        "model-args-rate-limit-wait-negative",
        lambda c: c.run("--model_args", "model=m,rate_limit_wait=-1", model="openai-audio"),
        (E, 2, "rate_limit_wait"),
    ),
    # -- casu_dataset build: catalogs, scenario files, output folders, fills
    (
        "build-catalog-missing-manifest",
        lambda c: catalog_case(c, "missing"),
        (E, 2, "--catalog", "nope.json"),
    ),
    (
        "build-catalog-missing-audio",
        lambda c: catalog_case(c, "missing-audio"),
        (E, 2, "--catalog", "missing audio file"),
    ),
    ("build-catalog-truncated-json", lambda c: catalog_case(c, "truncated"), (E, 2, "--catalog", "m.json")),
    ("build-catalog-json-list", lambda c: catalog_case(c, "list"), (E, 2, "m.json", "'clips' list")),
    ("build-catalog-latin1", lambda c: catalog_case(c, "latin1"), (E, 2, "--catalog", "m.json")),
    ("build-catalog-no-clips", lambda c: catalog_case(c, "empty"), (E, 2, "--catalog", "no usable")),
    (
        "build-catalog-all-clips-rejected",
        lambda c: catalog_case(c, "all-rejected"),
        (E, 2, "--catalog", "no usable", "silent"),
    ),
    (
        "build-catalog-clotho-spec",
        lambda c: catalog_case(c, "clotho-spec"),
        (E, 2, "--catalog 'clotho:only_one_part'"),
    ),
    (
        "build-catalog-clotho-no-csv",
        lambda c: catalog_case(c, "clotho-no-csv"),
        (E, 2, "--catalog", "nope.csv"),
    ),
    (
        "build-catalog-clotho-no-audio-dir",
        lambda c: catalog_case(c, "clotho-no-audio-dir"),
        (E, 2, "no_audio_here", "not a folder"),
    ),
    (
        "build-catalog-fsd-missing-column",
        lambda c: catalog_case(c, "fsd-missing-column"),
        (E, 2, "dev.csv", "missing column"),
    ),
    ("build-scenarios-family-latin1", lambda c: scenarios_non_utf8(c, True), (E, 2, "fam.yaml", "UTF-8")),
    ("build-scenarios-v1-latin1", lambda c: scenarios_non_utf8(c, False), (E, 2, "fam.yaml", "UTF-8")),
    ("build-out-under-file", lambda c: out_case(c, "under-file"), (E, 2, "--out", "is a file")),
    ("build-out-under-proc", lambda c: out_case(c, "proc"), (E, 2, "--out /proc/casu_out", "cannot write")),
    ("build-out-symlink-loop", lambda c: out_case(c, "loop"), (E, 2, "--out")),
    ("build-out-dangling-symlink", lambda c: out_case(c, "dangling"), (E, 2, "--out", "symlink")),
    ("compose-out-under-file", lambda c: out_case(c, "under-file", "compose"), (E, 2, "--out", "is a file")),
    ("merge-out-under-proc", lambda c: out_case(c, "proc", "merge"), (E, 2, "--out", "cannot write")),
    ("build-fill-unknown-bank-type", fill_type_case, (E, 1, "no_such_bank_type", "fam")),
    ("build-intended-clips-rejected", rejected_intended_case, (E, 1, "rejected", "silent")),
    ("build-rejected-clips-counted", rejected_counted, (OK,)),
    # -- review
    ("review-truncated-scenes", lambda c: review_truncated(c, "scenes"), (E, 2, "--dataset", "scenes")),
    ("review-truncated-questions", lambda c: review_truncated(c, ROLE), (E, 2, "--dataset", ROLE)),
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
    # -- secrets
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
    # -- outputs
    ("killed-run-sample-log-set-aside", killed_run_logs, (OK,)),
]

# Verdicts of these 98 cases before this issue, measured as the module docstring says. 12 cases
# call an API this issue added (option_moves, apply_review's `edits`, `catalog_rejected`), so on
# the old tree they stopped in the helper; they are counted by what the old code did with the
# input: the swap and moved-option edits were accepted and applied, the rewording listed
# nowhere, the 8 rejected clips reported nowhere (SILENT x5; the rewording itself was handled);
# Origin http://localhost, http://10.1.2.3:PORT, https://... and localhost:PORT under a
# 127.0.0.1 Host were accepted (SILENT x4), and an accepted decision on a question whose scene
# row is missing crashed the server thread (TRACEBACK; also under a port-less Host and Origin).
# The 5 `scenes-*` cases call CasuData.check_scenes (new): their datasets were run through the
# old harness with --conditions all and a plugin adapter that takes audio; each ended exit 4
# with per-sample TypeErrors or "scene ... annotation" errors (UNNAMED x5).
# The other 81 were classified by this file's own rules on the old tree (2026-12-01).
BEFORE = {"TRACEBACK": 22, "SILENT": 43, "UNNAMED": 18, "named": 14, "handled": 1}
VERDICTS: dict[str, str] = {}


def test_the_corpus_is_big_enough():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id, run, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(ctx, tmp_path, case_id, run, expect):
    ctx.tmp = tmp_path
    o = run(ctx)
    verdict, detail = _classify(o, expect)
    VERDICTS[case_id] = verdict
    assert verdict in ("named", "skip", "ok"), f"{verdict}: {case_id}: {detail}"


def test_before_after_table():
    """Printed with -s; runs last in this file (after every case has a verdict)."""
    if len(VERDICTS) < len(CASES):
        pytest.skip("run the whole file to get the table")  # only when cases were deselected with -k
    after = {"TRACEBACK": 0, "SILENT": 0, "UNNAMED": 0, "named": 0, "handled": 0}
    for v in VERDICTS.values():
        after["handled" if v in ("skip", "ok") else v] += 1
    rows = "\n".join(f"| {k.lower()} | {BEFORE[k]} | {after[k]} |" for k in after)
    print(f"\n{len(CASES)} cases\n| verdict | before | after |\n|---|---|---|\n{rows}")
    assert after["TRACEBACK"] == after["SILENT"] == after["UNNAMED"] == 0
