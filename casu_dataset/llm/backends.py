"""Chat backends behind one call: `complete(messages, schema=None, max_tokens=...) -> str`.

- LocalBackend: a transformers model on this machine (default SmolLM2-135M-Instruct).
- OpenAIBackend: any OpenAI-compatible /v1/chat/completions endpoint (vLLM, llama.cpp
  server, `transformers serve`, OpenAI). Base URL, model and key come from arguments or
  CASU_LLM_BASE_URL / CASU_LLM_MODEL / CASU_LLM_API_KEY (OPENAI_API_KEY as a fallback); the
  key is sent as a bearer token and never appears in errors or logs. Structured output is
  requested with `response_format: json_schema`; a server that rejects it is asked again
  without it, and the caller validates the reply either way.
"""
from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request


class BackendError(RuntimeError):
    pass


class LocalBackend:
    def __init__(self, model: str = "smollm2", device: str = "cpu"):
        from .local import LocalLM
        self.lm = LocalLM(model, device)
        self.fingerprint = self.lm.fingerprint

    def complete(self, messages: list[dict], schema: dict | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        # Greedy decoding; the schema is enforced by validation in the caller.
        return self.lm.chat(messages, max_new_tokens=max_tokens)


class OpenAIBackend:
    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 timeout: float = 120.0, max_retries: int = 4, backoff: float = 1.0):
        self.base_url = (base_url or os.environ.get("CASU_LLM_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        self.model = model or os.environ.get("CASU_LLM_MODEL")
        if not self.model:
            raise BackendError("openai backend: no model name (pass --llm-model or set CASU_LLM_MODEL)")
        self._key = api_key or os.environ.get("CASU_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.json_schema_ok = True
        self.fingerprint = f"openai:{self.base_url}:{self.model}"

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend({self.base_url!r}, model={self.model!r}, key={'set' if self._key else 'unset'})"

    def _post(self, payload: dict) -> dict:
        req = urllib.request.Request(self.base_url + "/chat/completions", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self._key}"} if self._key else {})})
        with urllib.request.urlopen(req, timeout=self.timeout) as r:
            return json.loads(r.read().decode())

    def complete(self, messages: list[dict], schema: dict | None = None, max_tokens: int = 512,
                 temperature: float = 0.0) -> str:
        payload = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature}
        if schema is not None and self.json_schema_ok:
            payload["response_format"] = {"type": "json_schema",
                                          "json_schema": {"name": "casu_output", "schema": schema}}
        last = None
        for attempt in range(self.max_retries + 1):
            try:
                data = self._post(payload)
                return data["choices"][0]["message"].get("content") or ""
            except urllib.error.HTTPError as err:
                body = err.read().decode(errors="replace")[:300]
                if err.code == 400 and "response_format" in payload and "response_format" in body.lower():
                    self.json_schema_ok = False  # this server cannot do structured output: ask plainly
                    payload.pop("response_format")
                    continue
                if err.code not in (408, 409, 429) and err.code < 500:
                    raise BackendError(f"{self.base_url}: HTTP {err.code}: {body}") from None
                last = f"HTTP {err.code}: {body}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            except (KeyError, IndexError, json.JSONDecodeError) as err:
                raise BackendError(f"{self.base_url}: malformed response ({err})") from None
            if attempt < self.max_retries:
                time.sleep(self.backoff * (2 ** attempt) * (0.5 + random.random() / 2))
        raise BackendError(f"{self.base_url}: gave up after {self.max_retries + 1} attempts ({last})")
