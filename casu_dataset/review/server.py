"""`python -m casu_dataset review --dataset PATH`: a local review page (stdlib HTTP server).

A page of our own rather than Gradio: no extra dependency (Gradio pulls ~100 packages),
starts in about a second, and is keyboard-first (see page.html for the keys). Bound to
127.0.0.1 unless --host says otherwise. Every decision is appended to
`<dataset>.decisions.jsonl` before the page is told it was saved.

A v2 dataset (family columns set) is reviewed by contrast family: GET /api/family/FAMILY_ID
gives the four variants side by side and each shared question once with every variant's key;
decisions on a family, a variant (kind scene) or a family question (FAMILY/TASK). A v1 dataset
keeps the per-scene view (GET /api/scene/SCENE_ID).

Writes are for the page this server served, nothing else: a POST must carry this server's own
Host (and Origin, when the browser sends one), a JSON content type and the per-session token
embedded in the page, so another site open in the reviewer's browser, or a DNS-rebinding page,
cannot write decisions; every request must name this server as its Host. Bodies over 1 MB
are refused with 413, malformed ones with a 400 naming the field. No absolute path is served."""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import logging
import re
import secrets
import socket
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from casu_dataset.contract import SCENES_CONFIG, mcq_configs, mcq_tasks
from casu_dataset.core.errors import Field, FieldError, InputError
from casu_dataset.review.decisions import (
    DecisionError,
    DecisionFileError,
    DecisionLog,
    check_no_option_in_question,
    decisions_path,
    option_moves,
    reject_duplicate_keys,
    validate,
    variant_question_error,
)

log = logging.getLogger(__name__)

FAMILY_COLS = ("family_id", "variant", "family_shape", "slot_kind", "speech_version", "fill")
STEMS = ("audio", "background", "speech", "events")
PAGE = Path(__file__).with_name("page.html")
MAX_BODY = 1 << 20  # a decision is a few hundred bytes; an edit a few kB
TOKEN_HEADER = "X-CASU-Token"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


class ReviewError(InputError, FieldError, ValueError):
    """A dataset the page cannot show; the message names serve()'s `dataset` (the command's --dataset)."""


DATASET = Field("dataset")


class ReviewData:
    """The built dataset (local folder), read with pyarrow: scenes, stems and questions."""

    def __init__(self, dataset: str | Path):
        from casu_dataset.formats.reader import BuiltDataset, LoadError

        self.root = Path(dataset)
        if not (self.root / "scenes").is_dir():
            raise ReviewError(DATASET, f" {self.root}: not a built CASU folder (no scenes/ config)")
        try:
            self._read(BuiltDataset(self.root))
        except LoadError as err:  # a mixed folder, a truncated or foreign parquet file
            raise ReviewError(DATASET, f" {err}") from None
        except KeyError as err:  # a table without a column the page needs
            raise ReviewError(
                DATASET, f" {self.root}: {self._config}/: no column {err} (not a CASU build)"
            ) from None
        self.log = DecisionLog(decisions_path(self.root))

    def _read(self, ds) -> None:
        from casu_dataset.formats.reader import ConfigNotFoundError

        self._config = SCENES_CONFIG  # named in the error if this config cannot be read
        self.scenes = {r["scene_id"]: r for r in ds.table(SCENES_CONFIG).arrow.to_pylist()}
        self.questions: dict[str, list[dict]] = {s: [] for s in self.scenes}
        self.question_rows: dict[str, dict] = {}
        for c in mcq_configs():
            self._config = c
            cols = [
                "id",
                "scene_id",
                "task",
                "question",
                "options",
                "answer",
                "rationale",
                "layers",
                "minimal_pair_id",
                *FAMILY_COLS,
            ]  # v1 folders have no family columns: those are left out
            try:
                t = ds.table(c, columns=cols)
            except ConfigNotFoundError:  # a folder without this config has no questions of it
                continue
            for r in t.arrow.to_pylist():
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

    def state(self, reviewer: str) -> dict:
        rv = self.log.review()
        scenes = []
        for sid, s in sorted(self.scenes.items()):
            scenes.append(
                {
                    "scene_id": sid,
                    "place": s["place"],
                    "speech_type": s["speech_type"],
                    "status": rv.status("scene", sid),
                    "questions": [
                        {"id": q["id"], "task": q["task"], "status": rv.status("question", q["id"])}
                        for q in self.questions.get(sid, [])
                    ],
                }
            )
        families = []
        for fid, sids in sorted(self.families.items()):
            s0 = self.scenes[sids[0]]
            families.append(
                {
                    "family_id": fid,
                    "shape": s0.get("family_shape"),
                    "slot_kind": s0.get("slot_kind"),
                    "place": s0["place"],
                    "speech_type": s0["speech_type"],
                    "status": rv.status("family", fid),
                    "variants": [
                        {
                            "scene_id": sid,
                            "variant": self.scenes[sid]["variant"],
                            "status": rv.status("scene", sid),
                        }
                        for sid in sids
                    ],
                    "questions": [
                        {
                            "item": item,
                            "task": item.split("/", 1)[1],
                            "status": rv.status("family_question", item),
                        }
                        for item in self._family_items(fid)
                    ],
                }
            )
        unknown = rv.unknown(self.known)
        warnings = [m.replace(str(self.log.path), self.log.path.name) for _, m in rv.bad_lines]
        if unknown:
            warnings.append(
                f"{len(unknown)} decision(s) on items not in this dataset (not counted, not applied): "
                + ", ".join(unknown[:20])
                + (" ..." if len(unknown) > 20 else "")
            )
        # names only: the page never needs (and a reader of it should not learn) absolute paths
        return {
            "reviewer": reviewer,
            "dataset": self.root.name,
            "decisions_file": self.log.path.name,
            "scenes": scenes,
            "families": families,
            "tasks": list(mcq_tasks()),
            "places": sorted({s["place"] for s in scenes}),
            "warnings": warnings,
            "conflicts": rv.conflicts,
            "counts": rv.counts(self.known),
        }

    def known(self, kind: str, item: str) -> bool:
        return item in {
            "scene": self.scenes,
            "question": self.question_ids,
            "family": self.families,
            "family_question": self.family_questions,
        }.get(kind, ())

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
        return {
            "scene_id": sid,
            "place": s["place"],
            "speech_type": s["speech_type"],
            "description": s["description"],
            "variant_of": s["variant_of"],
            "script": json.loads(s["script"]),
            "turns": [{k: t[k] for k in ("speaker", "text", "onset", "offset")} for t in ann["turns"]],
            "events": [{k: e[k] for k in ("id", "description", "onset", "offset")} for e in ann["events"]],
            "status": rv.status("scene", sid),
            "decision": rv.final.get(("scene", sid)),
            "questions": qs,
        }

    def _family_items(self, fid: str) -> list[str]:
        return [f"{fid}/{t}" for t in mcq_tasks() if f"{fid}/{t}" in self.family_questions]

    def family(self, fid: str) -> dict:
        """One family for the side-by-side view: its variants, its speech (one entry per speech
        version) and each shared question once, with every variant's key letter."""
        sids = self.families.get(fid)
        if sids is None:
            raise KeyError(fid)
        rv = self.log.review()
        s0 = self.scenes[sids[0]]
        variants: list = []
        speech: dict[str, dict[str, Any]] = {}
        for sid in sids:
            s = self.scenes[sid]
            ann = json.loads(s["annotation"])
            bg = json.loads(s["script"]).get("background") or {}
            variants.append(
                {
                    "scene_id": sid,
                    "variant": s["variant"],
                    "fill": s.get("fill"),
                    "speech_version": s.get("speech_version"),
                    "description": s["description"],
                    "background": bg.get("description", ""),
                    "events": [
                        {k: e[k] for k in ("id", "description", "onset", "offset")} for e in ann["events"]
                    ],
                    "status": rv.status("scene", sid),
                    "decision": rv.final.get(("scene", sid)),
                }
            )
            version = s.get("speech_version") or ""
            if version not in speech:  # byte-identical within a speech version: show it once
                speech[version] = {
                    "version": version,
                    "variants": [],
                    "turns": [
                        {k: t[k] for k in ("speaker", "text", "onset", "offset")} for t in ann["turns"]
                    ],
                }
            speech[version]["variants"].append(s["variant"])
        questions = []
        for item in self._family_items(fid):
            per = self.family_questions[item]
            q0 = per[next(iter(sorted(per)))]
            d = rv.final.get(("family_question", item))
            shown = dict(
                {"question": q0["question"], "options": q0["options"]},
                **(d["edit"] if d and d["action"] == "edit" else {}),
            )
            questions.append(
                {
                    "item": item,
                    "task": q0["task"],
                    **shown,
                    "original": {"question": q0["question"], "options": q0["options"]},
                    "layers": q0["layers"],
                    "status": rv.status("family_question", item),
                    "decision": d,
                    "keys": {self.scenes[sid]["variant"]: q["answer"] for sid, q in sorted(per.items())},
                    "rationales": {
                        self.scenes[sid]["variant"]: q["rationale"] for sid, q in sorted(per.items())
                    },
                    "ids": sorted(q["id"] for q in per.values()),
                }
            )
        return {
            "family_id": fid,
            "shape": s0.get("family_shape"),
            "slot_kind": s0.get("slot_kind"),
            "place": s0["place"],
            "speech_type": s0["speech_type"],
            "status": rv.status("family", fid),
            "decision": rv.final.get(("family", fid)),
            "variants": variants,
            "speech": list(speech.values()),
            "questions": questions,
        }

    def check_decision(self, body: dict) -> dict:
        """A valid decision on an item of this dataset, or DecisionError saying why not."""
        rec = validate(body)
        kind, item = rec["kind"], rec["item"]
        if not self.known(kind, item):
            raise DecisionError(f"{kind} {item!r} is not in this dataset")
        if kind == "question":
            q = self.question_rows[item]
            msg = variant_question_error(rec, self.scenes.get(q["scene_id"], {}).get("family_id"), q["task"])
            if msg:
                raise DecisionError(msg)
        if kind == "family_question" and rec["action"] == "edit":
            q0 = next(iter(self.family_questions[item].values()))
            # store the whole shared text, so the record reads the same whatever the dataset
            rec["edit"] = {
                "question": rec["edit"].get("question", q0["question"]),
                "options": rec["edit"].get("options", list(q0["options"])),
            }
            check_no_option_in_question(rec["edit"]["question"], rec["edit"]["options"])
            why = option_moves(list(q0["options"]), rec["edit"]["options"])
            if why:
                raise DecisionError(why)
        return rec

    @functools.lru_cache(maxsize=64)
    def timeline(self, sid: str) -> bytes:
        from casu_dataset.core.audio_io import decode_bytes
        from casu_dataset.review.timeline_picture import timeline_png

        s = self.scenes[sid]
        return timeline_png(decode_bytes(s["audio"]["bytes"]), json.loads(s["annotation"]))

    def audio(self, sid: str, stem: str) -> bytes:
        return self.scenes[sid][stem]["bytes"]


def _split_host(value: str) -> tuple[str, int | None]:
    """'name:port', '[v6]:port' or 'name' -> (lower-case name, port or None)."""
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", value.strip())
    if not m:
        return "", None
    name = (m.group(1) or m.group(3) or "").lower()
    port = m.group(2) or m.group(4)
    return name, int(port) if port else None


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def own_host_names(bind: str) -> set[str]:
    """Names a browser may use for this server. IP literals are always its own (a DNS-rebinding
    page arrives under the attacker's domain name, never an IP); names are this machine's only."""
    names = set(LOOPBACK_NAMES) | {bind.lower()}
    if not is_loopback(bind):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


def host_ok(value: str | None, names: set[str], port: int) -> bool:
    if not value:
        return False
    name, p = _split_host(value)
    if p is not None and p != port:
        return False
    if name in names:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def make_handler(data: ReviewData, reviewer: str, token: str = "", bind: str = "127.0.0.1"):
    names = own_host_names(bind)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # quiet: the terminal shows only errors
            pass

        def _send(self, code, body: bytes, ctype: str):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, obj, code=HTTPStatus.OK):
            self._send(code, json.dumps(obj, ensure_ascii=False).encode(), "application/json")

        def _refuse(self, code, msg: str):
            self.close_connection = True  # the unread body (if any) must not be taken for a request
            return self._json({"error": msg}, code)

        def _port(self) -> int:
            addr = self.server.server_address  # typed for every socket family; this one is TCP
            assert isinstance(addr, tuple)
            return addr[1]

        def _foreign_host(self) -> str | None:
            port = self._port()
            host = self.headers.get("Host")
            if not host_ok(host, names, port):
                return f"Host {host!r} is not this review server's (DNS rebinding?); open http://127.0.0.1:{port}/"
            return None

        def do_GET(self):
            why = self._foreign_host()
            if why:
                return self._refuse(HTTPStatus.FORBIDDEN, why)
            path = self.path.split("?", 1)[0]
            try:
                if path == "/":
                    page = PAGE.read_text(encoding="utf-8").replace("{{CASU_TOKEN}}", token)
                    return self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8")
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

        def _write_refusal(self) -> tuple[int, str] | None:
            """Why this POST may not write (status, message), before its body is read."""
            why = self._foreign_host()
            if why:
                return HTTPStatus.FORBIDDEN, why
            port = self._port()
            origin = self.headers.get("Origin")
            if origin is not None:
                # Same origin means the same scheme, host and port as the (already checked) Host the
                # page was served under: http://localhost (port 80) or another of this machine's
                # addresses is another origin, even with a valid token.
                host = (self.headers.get("Host") or "").strip().lower()
                if origin.strip().lower() != f"http://{host}" or _split_host(host)[1] != port:
                    return (
                        HTTPStatus.FORBIDDEN,
                        f"Origin {origin!r} is not this review server (http://{host}): "
                        "cross-site writes are refused",
                    )
            if (self.headers.get("Sec-Fetch-Site") or "same-origin") not in ("same-origin", "none"):
                return (
                    HTTPStatus.FORBIDDEN,
                    f"Sec-Fetch-Site {self.headers['Sec-Fetch-Site']!r}: cross-site writes are refused",
                )
            ctype = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if ctype != "application/json":
                return (
                    HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                    f"Content-Type {ctype or '(none)'!r}: a decision is sent as application/json",
                )
            if not hmac.compare_digest((self.headers.get(TOKEN_HEADER) or "").encode(), token.encode()):
                return (
                    HTTPStatus.FORBIDDEN,
                    f"header {TOKEN_HEADER} is missing or wrong: decisions are "
                    "accepted only from the page this server served (reload it)",
                )
            length = self.headers.get("Content-Length")
            if length is None:
                return HTTPStatus.LENGTH_REQUIRED, "Content-Length is required"
            if not re.fullmatch(r"\d{1,18}", length.strip()):
                return HTTPStatus.BAD_REQUEST, f"Content-Length {length!r} is not a byte count"
            if int(length) > MAX_BODY:
                return (
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"body of {int(length)} bytes: a decision is at most {MAX_BODY} bytes",
                )
            return None

        def do_POST(self):
            if self.path != "/api/decision":
                return self._refuse(HTTPStatus.NOT_FOUND, f"no such endpoint: {self.path}")
            refusal = self._write_refusal()
            if refusal:
                return self._refuse(*refusal)
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                body = json.loads(raw.decode("utf-8"), object_pairs_hook=reject_duplicate_keys)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
                return self._json({"error": f"body: not JSON ({err})"}, HTTPStatus.BAD_REQUEST)
            except DecisionError as err:
                return self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
            try:
                if not isinstance(body, dict):
                    raise DecisionError(f"body: a decision must be a JSON object, got {type(body).__name__}")
                body.setdefault("reviewer", reviewer)
                body.pop("time", None)  # the server stamps the time
                rec = data.log.append(data.check_decision(body))
            except DecisionError as err:
                return self._json({"error": str(err)}, HTTPStatus.BAD_REQUEST)
            except DecisionFileError as err:  # not saved: the page shows it and keeps the decision
                return self._json({"error": str(err)}, HTTPStatus.INSUFFICIENT_STORAGE)
            self._json({"ok": True, "saved": rec})

    return Handler


class ReviewServer(ThreadingHTTPServer):
    token = ""  # the session token the page carries (serve sets it)


def serve(dataset: str | Path, host: str = "127.0.0.1", port: int = 8765, reviewer: str = "reviewer"):
    """The review server (not started) and its data; a per-session token goes into the page."""
    data = ReviewData(dataset)
    token = secrets.token_urlsafe(32)
    srv = ReviewServer((host, port), make_handler(data, reviewer, token, host))
    srv.token = token
    if not is_loopback(host):
        bar = "!" * 78
        log.warning(
            f"{bar}\nWARNING: the review server listens on {host}:{srv.server_address[1]}, not only on this "
            "machine.\nAnyone who can reach that address can read the dataset and, with the page's token, "
            "write decisions.\nUse the default --host 127.0.0.1 (and an SSH tunnel for remote review) unless "
            f"this network is trusted.\n{bar}"
        )
    return srv, data
