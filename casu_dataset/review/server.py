"""`python -m casu_dataset review --dataset PATH`: a local review page (stdlib HTTP server).

A page of our own rather than Gradio: no extra dependency (Gradio pulls ~100 packages),
starts in about a second, and is keyboard-first (see page.html for the keys). Bound to
127.0.0.1 unless --host says otherwise. Every decision is appended to
`<dataset>.decisions.jsonl` before the page is told it was saved."""
from __future__ import annotations

import functools
import json
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..build import TASK_CONFIGS
from .decisions import DecisionError, DecisionLog, decisions_path

STEMS = ("audio", "background", "speech", "events")
PAGE = Path(__file__).with_name("page.html")


class ReviewError(ValueError):
    pass


class ReviewData:
    """The built dataset (local folder), read with pyarrow: scenes, stems and questions."""

    def __init__(self, dataset: str | Path):
        import pyarrow.parquet as pq
        self.root = Path(dataset)
        if not (self.root / "scenes").is_dir():
            raise ReviewError(f"--dataset {self.root}: not a built CASU folder (no scenes/ config)")
        self.scenes = {r["scene_id"]: r for r in pq.read_table(self.root / "scenes").to_pylist()}
        self.questions: dict[str, list[dict]] = {s: [] for s in self.scenes}
        for c in TASK_CONFIGS:
            if (self.root / c).is_dir():
                for r in pq.read_table(self.root / c, columns=[
                        "id", "scene_id", "task", "question", "options", "answer", "rationale", "layers",
                        "minimal_pair_id"]).to_pylist():
                    self.questions.setdefault(r["scene_id"], []).append(r)
        self.question_ids = {q["id"] for qs in self.questions.values() for q in qs}
        self.log = DecisionLog(decisions_path(self.root))

    def state(self, reviewer: str) -> dict:
        rv = self.log.review()
        scenes = []
        for sid, s in sorted(self.scenes.items()):
            scenes.append({"scene_id": sid, "place": s["place"], "speech_type": s["speech_type"],
                           "status": rv.status("scene", sid),
                           "questions": [{"id": q["id"], "task": q["task"], "status": rv.status("question", q["id"])}
                                         for q in self.questions.get(sid, [])]})
        return {"reviewer": reviewer, "dataset": str(self.root), "decisions_file": str(self.log.path),
                "scenes": scenes, "tasks": list(TASK_CONFIGS), "places": sorted({s["place"] for s in scenes}),
                "warnings": [m for _, m in rv.bad_lines], "conflicts": rv.conflicts, "counts": rv.counts()}

    def scene(self, sid: str) -> dict:
        s = self.scenes.get(sid)
        if s is None:
            raise KeyError(sid)
        rv = self.log.review()
        ann = json.loads(s["annotation"])
        qs = []
        for q in self.questions.get(sid, []):
            d = rv.final.get(("question", q["id"]))
            shown = dict(q, **(d["edit"] if d and d["action"] == "edit" else {}))
            qs.append(dict(shown, status=rv.status("question", q["id"]), decision=d, original=q))
        return {"scene_id": sid, "place": s["place"], "speech_type": s["speech_type"], "description": s["description"],
                "variant_of": s["variant_of"], "script": json.loads(s["script"]),
                "turns": [{k: t[k] for k in ("speaker", "text", "onset", "offset")} for t in ann["turns"]],
                "events": [{k: e[k] for k in ("id", "description", "onset", "offset")} for e in ann["events"]],
                "status": rv.status("scene", sid), "decision": rv.final.get(("scene", sid)), "questions": qs}

    @functools.lru_cache(maxsize=64)
    def timeline(self, sid: str) -> bytes:
        from ..audio_io import decode_bytes
        from .timeline import timeline_png
        s = self.scenes[sid]
        return timeline_png(decode_bytes(s["audio"]["bytes"]), json.loads(s["annotation"]))

    def audio(self, sid: str, stem: str) -> bytes:
        return self.scenes[sid][stem]["bytes"]


def make_handler(data: ReviewData, reviewer: str):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet: the terminal shows only errors
            pass

        def _send(self, code, body: bytes, ctype: str):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj, code=HTTPStatus.OK):
            self._send(code, json.dumps(obj, ensure_ascii=False).encode(), "application/json")

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            try:
                if path == "/":
                    return self._send(HTTPStatus.OK, PAGE.read_bytes(), "text/html; charset=utf-8")
                if path == "/api/state":
                    return self._json(data.state(reviewer))
                if m := re.fullmatch(r"/api/scene/([\w\-]+)", path):
                    return self._json(data.scene(m.group(1)))
                if m := re.fullmatch(r"/audio/([\w\-]+)/(\w+)\.flac", path):
                    if m.group(2) not in STEMS:
                        raise KeyError(m.group(2))
                    return self._send(HTTPStatus.OK, data.audio(m.group(1), m.group(2)), "audio/flac")
                if m := re.fullmatch(r"/timeline/([\w\-]+)\.png", path):
                    return self._send(HTTPStatus.OK, data.timeline(m.group(1)), "image/png")
            except KeyError as err:
                return self._json({"error": f"not found: {err}"}, HTTPStatus.NOT_FOUND)
            self._json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND)

        def do_POST(self):
            if self.path != "/api/decision":
                return self._json({"error": f"no such endpoint: {self.path}"}, HTTPStatus.NOT_FOUND)
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                body.setdefault("reviewer", reviewer)
                body.pop("time", None)  # the server stamps the time
                kind, item = body.get("kind"), body.get("item")
                known = (kind == "scene" and item in data.scenes) or (kind == "question" and item in data.question_ids)
                if not known:
                    raise DecisionError(f"{kind} {item!r} is not in this dataset")
                rec = data.log.append(body)
            except (DecisionError, json.JSONDecodeError, ValueError) as err:
                return self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
            self._json({"ok": True, "saved": rec})

    return Handler


def serve(dataset: str | Path, host: str = "127.0.0.1", port: int = 8765, reviewer: str = "reviewer"):
    data = ReviewData(dataset)
    srv = ThreadingHTTPServer((host, port), make_handler(data, reviewer))
    return srv, data
