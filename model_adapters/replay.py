"""Fixed answers replayed by sample id: the same replies through CASU's harness and through the
peers (lmms-eval, lm-eval; harness/peers/), so their scoring can be compared sample by sample.

    python -m harness --model replay --model_args responses=answers.jsonl --tasks all --dataset casu_mini

The file has one JSON object per line, `{"id": ROW_ID, "response": TEXT}` (a dataset row's `id`;
`task` may be given too and is checked against the request's task). A request whose id the file
lacks is an error naming the file and the id: nothing is ever made up."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from model_adapters.base import Adapter, GenerationSettings, ModelArgsError, Request


def read_responses(path: str | Path) -> tuple[dict[str, dict], str]:
    """{id: {"response": text, "task": name or None}} of a responses JSONL file, and the sha256 of
    its bytes. ModelArgsError names the file and line of anything wrong (not JSON, no `id`, a
    non-string `response`, an id given twice)."""
    p = Path(path).expanduser()
    try:
        blob = p.read_bytes()
    except OSError as err:
        raise ModelArgsError(f"--model_args responses={path}: cannot read it ({err.strerror})") from None
    out: dict[str, dict] = {}
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ModelArgsError(f"{path}: not UTF-8 text (byte {err.start})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as err:
            raise ModelArgsError(f"{path}:{n}: not a JSON object ({err})") from None
        if not isinstance(obj, dict):
            raise ModelArgsError(f"{path}:{n}: expected a JSON object with 'id' and 'response'")
        rid, resp, task = obj.get("id"), obj.get("response"), obj.get("task")
        if not isinstance(rid, str) or not rid:
            raise ModelArgsError(f"{path}:{n}: field 'id' must be a non-empty string, got {rid!r}")
        if not isinstance(resp, str):
            raise ModelArgsError(f"{path}:{n}: field 'response' of id {rid!r} must be a string, got {resp!r}")
        if task is not None and not isinstance(task, str):
            raise ModelArgsError(f"{path}:{n}: field 'task' of id {rid!r} must be a string, got {task!r}")
        if rid in out:
            raise ModelArgsError(f"{path}:{n}: id {rid!r} is given twice")
        out[rid] = {"response": resp, "task": task}
    if not out:
        raise ModelArgsError(f"{path}: no responses in it (one JSON object per line: id, response)")
    return out, hashlib.sha256(blob).hexdigest()


def lookup(responses: dict[str, dict], path: str | Path, rid: str, task: str = "") -> str:
    """The reply recorded for `rid`; ModelArgsError naming the file and the id when it has none (or
    when the line names another task)."""
    hit = responses.get(rid)
    if hit is None:
        raise ModelArgsError(f"{path}: no response for id {rid!r}" + (f" (task {task})" if task else ""))
    if task and hit["task"] and hit["task"] != task:
        raise ModelArgsError(
            f"{path}: id {rid!r} is recorded for task {hit['task']!r}, asked by task {task!r}"
        )
    return hit["response"]


def check_audio(x, rid: str, sample_rate: int = 16000) -> None:
    """What an audio model is handed: mono float32 at `sample_rate`, non-empty and finite."""
    arr = x.get("array") if isinstance(x, dict) else x
    sr = x.get("sampling_rate", sample_rate) if isinstance(x, dict) else sample_rate
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.ndim != 1 or arr.size == 0:
        got = f"{type(arr).__name__} {getattr(arr, 'dtype', '')} shape {getattr(arr, 'shape', '')}"
        raise ValueError(f"id {rid!r}: audio is {got}, expected non-empty mono float32")
    if sr != sample_rate:
        raise ValueError(f"id {rid!r}: audio at {sr} Hz, expected {sample_rate}")
    if not np.isfinite(arr).all():
        raise ValueError(f"id {rid!r}: audio has non-finite samples")


class Replay(Adapter):
    """Replays recorded replies by sample id (`responses=FILE.jsonl`); for checks, never a model."""

    name = "replay"
    # The replies do not depend on the audio: by default it is not even prepared (the audio probe
    # is skipped, saying so). `audio=true` has the harness prepare each request's audio as for a
    # real model, and checks it is mono float32 at 16 kHz (for timing the harness like for like).
    uses_audio = False
    chat_template_how = "renders no prompt (recorded replies, looked up by sample id)"

    def __init__(self, responses: str, audio: bool = False):
        super().__init__(responses=responses, audio=audio)
        self.path = responses
        self.responses, self.sha256 = read_responses(responses)
        self.uses_audio = bool(audio)

    def info(self) -> dict:
        # The file's content, not only its name, keys the response cache.
        return dict(super().info(), responses_sha256=self.sha256)

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        out = []
        for r in requests:
            if self.uses_audio:
                check_audio(r.audio, r.id, self.sample_rate)
            out.append(lookup(self.responses, self.path, r.id, r.task))
        return out
