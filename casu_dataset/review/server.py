"""`python -m casu_dataset review --dataset PATH`: a local review page (stdlib HTTP server).

A page of our own rather than Gradio: no extra dependency (Gradio pulls ~100 packages),
starts in about a second, and is keyboard-first (see page.html for the keys). Bound to
127.0.0.1 unless --host says otherwise. Every decision is appended to
`<dataset>.decisions.jsonl` before the page is told it was saved.

A v2 dataset (family columns set) is reviewed by contrast family: GET /api/family/FAMILY_ID
gives the four variants side by side and each shared question once with every variant's key;
decisions on a family, a variant (kind scene) or a family question (FAMILY/TASK). A v1 dataset
keeps the per-scene view (GET /api/scene/SCENE_ID)."""
from __future__ import annotations

import functools
import json
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ..build import TASK_CONFIGS
from .decisions import (DecisionError, DecisionLog, check_no_option_in_question, decisions_path, validate,
                        variant_question_error)

FAMILY_COLS = ("family_id", "variant", "family_shape", "slot_kind", "speech_version", "fill")
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
        self.question_rows: dict[str, dict] = {}
        for c in TASK_CONFIGS:
            files = sorted((self.root / c).glob("*.parquet"))
            if files:
                names = set(pq.read_schema(files[0]).names)  # v1 folders have no family columns
                cols = ["id", "scene_id", "task", "question", "options", "answer", "rationale", "layers",
                        "minimal_pair_id", *(f for f in FAMILY_COLS if f in names)]
                for r in pq.read_table(self.root / c, columns=cols).to_pylist():
                    self.questions.setdefault(r["scene_id"], []).append(r)
                    self.question_rows[r["id"]] = r
        self.question_ids = set(self.question_rows)
        # Contrast families (v2): family id -> its variants' scene ids, in variant order, and
        # FAMILY/TASK -> {scene id: that variant's question row}.
        self.families: dict[str, list[str]] = {}
        for sid, s in sorted(self.scenes.items(), key=lambda kv: (kv[1].get("variant") or "", kv[0])):
            if s.get("family_id"):
                self.families.setdefault(s["family_id"], []).append(sid)
        self.family_questions: dict[str, dict[str, dict]] = {}
        for q in self.question_rows.values():
            fid = self.scenes.get(q["scene_id"], {}).get("family_id")
            if fid:
                self.family_questions.setdefault(f"{fid}/{q['task']}", {})[q["scene_id"]] = q
        self.log = DecisionLog(decisions_path(self.root))

    def state(self, reviewer: str) -> dict:
        rv = self.log.review()
        scenes = []
        for sid, s in sorted(self.scenes.items()):
            scenes.append({"scene_id": sid, "place": s["place"], "speech_type": s["speech_type"],
                           "status": rv.status("scene", sid),
                           "questions": [{"id": q["id"], "task": q["task"], "status": rv.status("question", q["id"])}
                                         for q in self.questions.get(sid, [])]})
        families = []
        for fid, sids in sorted(self.families.items()):
            s0 = self.scenes[sids[0]]
            families.append({
                "family_id": fid, "shape": s0.get("family_shape"), "slot_kind": s0.get("slot_kind"),
                "place": s0["place"], "speech_type": s0["speech_type"], "status": rv.status("family", fid),
                "variants": [{"scene_id": sid, "variant": self.scenes[sid]["variant"],
                              "status": rv.status("scene", sid)} for sid in sids],
                "questions": [{"item": item, "task": item.split("/", 1)[1],
                               "status": rv.status("family_question", item)} for item in self._family_items(fid)]})
        return {"reviewer": reviewer, "dataset": str(self.root), "decisions_file": str(self.log.path),
                "scenes": scenes, "families": families, "tasks": list(TASK_CONFIGS),
                "places": sorted({s["place"] for s in scenes}),
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

    def _family_items(self, fid: str) -> list[str]:
        return [f"{fid}/{t}" for t in TASK_CONFIGS if f"{fid}/{t}" in self.family_questions]

    def family(self, fid: str) -> dict:
        """One family for the side-by-side view: its variants, its speech (one entry per speech
        version) and each shared question once, with every variant's key letter."""
        sids = self.families.get(fid)
        if sids is None:
            raise KeyError(fid)
        rv = self.log.review()
        s0 = self.scenes[sids[0]]
        variants, speech = [], {}
        for sid in sids:
            s = self.scenes[sid]
            ann = json.loads(s["annotation"])
            bg = json.loads(s["script"]).get("background") or {}
            variants.append({
                "scene_id": sid, "variant": s["variant"], "fill": s.get("fill"),
                "speech_version": s.get("speech_version"),
                "description": s["description"], "background": bg.get("description", ""),
                "events": [{k: e[k] for k in ("id", "description", "onset", "offset")} for e in ann["events"]],
                "status": rv.status("scene", sid), "decision": rv.final.get(("scene", sid))})
            version = s.get("speech_version") or ""
            if version not in speech:  # byte-identical within a speech version: show it once
                speech[version] = {"version": version, "variants": [],
                                   "turns": [{k: t[k] for k in ("speaker", "text", "onset", "offset")}
                                             for t in ann["turns"]]}
            speech[version]["variants"].append(s["variant"])
        questions = []
        for item in self._family_items(fid):
            per = self.family_questions[item]
            q0 = per[next(iter(sorted(per)))]
            d = rv.final.get(("family_question", item))
            shown = dict({"question": q0["question"], "options": q0["options"]},
                         **(d["edit"] if d and d["action"] == "edit" else {}))
            questions.append({
                "item": item, "task": q0["task"], **shown, "original": {"question": q0["question"],
                                                                        "options": q0["options"]},
                "layers": q0["layers"], "status": rv.status("family_question", item), "decision": d,
                "keys": {self.scenes[sid]["variant"]: q["answer"] for sid, q in sorted(per.items())},
                "rationales": {self.scenes[sid]["variant"]: q["rationale"] for sid, q in sorted(per.items())},
                "ids": sorted(q["id"] for q in per.values())})
        return {"family_id": fid, "shape": s0.get("family_shape"), "slot_kind": s0.get("slot_kind"),
                "place": s0["place"], "speech_type": s0["speech_type"], "status": rv.status("family", fid),
                "decision": rv.final.get(("family", fid)), "variants": variants, "speech": list(speech.values()),
                "questions": questions}

    def check_decision(self, body: dict) -> dict:
        """A valid decision on an item of this dataset, or DecisionError saying why not."""
        rec = validate(body)
        kind, item = rec["kind"], rec["item"]
        known = {"scene": self.scenes, "question": self.question_ids, "family": self.families,
                 "family_question": self.family_questions}[kind]
        if item not in known:
            raise DecisionError(f"{kind} {item!r} is not in this dataset")
        if kind == "question":
            q = self.question_rows[item]
            msg = variant_question_error(rec, self.scenes[q["scene_id"]].get("family_id"), q["task"])
            if msg:
                raise DecisionError(msg)
        if kind == "family_question" and rec["action"] == "edit":
            q0 = next(iter(self.family_questions[item].values()))
            # store the whole shared text, so the record reads the same whatever the dataset
            rec["edit"] = {"question": rec["edit"].get("question", q0["question"]),
                           "options": rec["edit"].get("options", list(q0["options"]))}
            check_no_option_in_question(rec["edit"]["question"], rec["edit"]["options"])
        return rec

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
                if m := re.fullmatch(r"/api/scene/([\w\-.]+)", path):  # family variants: FAMILY.VARIANT
                    return self._json(data.scene(m.group(1)))
                if m := re.fullmatch(r"/api/family/([\w\-]+)", path):
                    return self._json(data.family(m.group(1)))
                if m := re.fullmatch(r"/audio/([\w\-.]+)/(\w+)\.flac", path):
                    if m.group(2) not in STEMS:
                        raise KeyError(m.group(2))
                    return self._send(HTTPStatus.OK, data.audio(m.group(1), m.group(2)), "audio/flac")
                if m := re.fullmatch(r"/timeline/([\w\-.]+)\.png", path):
                    return self._send(HTTPStatus.OK, data.timeline(m.group(1)), "image/png")
            except KeyError as err:
                return self._json({"error": f"not found: {err}"}, HTTPStatus.NOT_FOUND)
            self._json({"error": f"no such page: {path}"}, HTTPStatus.NOT_FOUND)

        def do_POST(self):
            if self.path != "/api/decision":
                return self._json({"error": f"no such endpoint: {self.path}"}, HTTPStatus.NOT_FOUND)
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not isinstance(body, dict):
                    raise DecisionError("a decision must be a JSON object")
                body.setdefault("reviewer", reviewer)
                body.pop("time", None)  # the server stamps the time
                rec = data.log.append(data.check_decision(body))
            except (DecisionError, json.JSONDecodeError, ValueError) as err:
                return self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
            self._json({"ok": True, "saved": rec})

    return Handler


def serve(dataset: str | Path, host: str = "127.0.0.1", port: int = 8765, reviewer: str = "reviewer"):
    data = ReviewData(dataset)
    srv = ThreadingHTTPServer((host, port), make_handler(data, reviewer))
    return srv, data
