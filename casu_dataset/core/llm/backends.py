"""Chat backends behind one call: `complete(messages, schema=None, max_tokens=...) -> str`.

- LocalBackend: a transformers model on this machine (default SmolLM2-135M-Instruct).
- OpenAIBackend: any OpenAI-compatible /v1/chat/completions endpoint (vLLM, llama.cpp
  server, `transformers serve`, OpenAI), through the `openai` SDK. Base URL, model and key come
  from arguments or CASU_LLM_BASE_URL / CASU_LLM_MODEL / CASU_LLM_API_KEY (OPENAI_API_KEY as a
  fallback); the key is sent only as the bearer token (no header at all without a key) and
  never appears in errors or logs. Structured output is
  requested with `response_format: json_schema`; a server that rejects it is asked again
  without it, and the caller validates the reply either way. Callers may call `complete` from
  several threads: at most `concurrency` requests are in flight (a semaphore that backends on
  the same server can share), and transient errors (5xx, timeouts, dropped connections) are
  retried with jittered exponential backoff (`max_retries`); a 429 is waited out (a numeric
  Retry-After, else backoff) within `rate_limit_wait` seconds and never counts as a retry. A
  BackendError says whether it is `transient` (retries or budget spent, a malformed reply: this
  request failed) or not (401/403/404 and other refusals: no request will succeed).
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

from casu_dataset.core.errors import CasuError


class BackendError(CasuError, RuntimeError):
    """`transient`: this request failed but others may succeed (retries or the rate-limit budget
    ran out, a malformed reply); False when the server refused it as such (401, 403, 404, ...)."""

    exit_code = 3

    def __init__(self, msg: str, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


RATE_LIMIT_WAIT = 300.0  # seconds one request may spend waiting out 429s before it fails


class LocalBackend:
    def __init__(self, model: str = "smollm2", device: str = "cpu"):
        from casu_dataset.core.llm.local import LocalLM

        self.lm = LocalLM(model, device)
        self.fingerprint = self.lm.fingerprint
        self._lock = threading.Lock()  # one model in memory: callers in several threads take turns

    def complete(
        self,
        messages: list[dict],
        schema: dict | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
    ) -> str:
        # Greedy decoding; the schema is enforced by validation in the caller.
        with self._lock:
            return self.lm.chat(messages, max_new_tokens=max_tokens)


class OpenAIBackend:
    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        concurrency: int = 1,
        slots: threading.Semaphore | None = None,
        rate_limit_wait: float = RATE_LIMIT_WAIT,
    ):
        self.base_url = (
            base_url or os.environ.get("CASU_LLM_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.model = model or os.environ.get("CASU_LLM_MODEL")
        if not self.model:
            raise BackendError("openai backend: no model name (pass --llm-model or set CASU_LLM_MODEL)")
        self._key = api_key or os.environ.get("CASU_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.json_schema_ok = True
        self.rate_limit_wait = rate_limit_wait
        # what the requests met, for reports and load tests: retries (5xx, timeouts, dropped
        # connections), rate-limit waits (429: not counted against max_retries), failures
        self.stats = {"requests": 0, "retries": 0, "rate_limited": 0, "rate_limit_seconds": 0.0, "failed": 0}
        self._stats_lock = threading.Lock()
        if concurrency < 1:
            raise BackendError(f"openai backend: concurrency must be >= 1, got {concurrency}")
        self.slots = slots or threading.BoundedSemaphore(concurrency)
        self.fingerprint = f"openai:{self.base_url}:{self.model}"
        self._client = None
        self._client_lock = threading.Lock()  # callers in several threads make one client

    def __repr__(self) -> str:  # never show the key
        return (
            f"OpenAIBackend({self.base_url!r}, model={self.model!r}, key={'set' if self._key else 'unset'})"
        )

    def _redact(self, text) -> str:
        from casu_dataset.core.redact import redact

        return redact(text, [self._key])

    @property
    def client(self):
        """The SDK client, made on first use. Its own retries are off: this class retries (with the
        response_format fallback, the shared semaphore and its own backoff settings)."""
        with self._client_lock:
            if self._client is None:
                import openai

                from casu_dataset.core.redact import guard_logging, register_secret

                register_secret(self._key)
                guard_logging()  # the SDK's and httpx's DEBUG logs print raw headers (OPENAI_LOG=debug too)
                # The SDK insists on a key; a keyless local server gets a placeholder that is never
                # sent (the Authorization header is omitted).
                self._client = openai.OpenAI(
                    base_url=self.base_url, api_key=self._key or "unused", timeout=self.timeout, max_retries=0
                )
            return self._client

    def _post(self, payload: dict):
        import openai

        no_key = {} if self._key else {"extra_headers": {"Authorization": openai.Omit()}}
        with self.slots:
            return self.client.chat.completions.create(**payload, **no_key)

    def complete(
        self,
        messages: list[dict],
        schema: dict | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
    ) -> str:
        import openai

        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if schema is not None and self.json_schema_ok:
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "casu_output", "schema": schema},
            }
        last = None
        attempt, waited = 0, 0.0
        self._count("requests")
        while True:
            wait = None
            try:
                reply = self._post(payload)
            except openai.APIStatusError as err:
                code = err.status_code
                body = self._redact(_body(err))[:300]  # servers echo keys in 401s
                if code == 400 and "response_format" in payload and "response_format" in body.lower():
                    self.json_schema_ok = False  # this server cannot do structured output: ask plainly
                    payload.pop("response_format")
                    continue
                if code not in (408, 409, 429) and code < 500:
                    self._count("failed")
                    # 401/403/404: the key or the model is refused, no request will succeed; another
                    # 4xx (a clip too long for the model, say) is this request's failure
                    raise BackendError(
                        f"{self.base_url}: HTTP {code}: {body}", transient=code not in (401, 403, 404)
                    ) from None
                last = f"HTTP {code}: {body}"
                wait = _retry_after(err.response.headers.get("Retry-After"))
                if code == 429:  # a rate limit is waited out (within the budget), not counted as a failure
                    pause = wait if wait is not None else min(30.0, self.backoff * 2 ** min(attempt, 5))
                    if waited + pause <= self.rate_limit_wait:
                        waited += pause
                        self._count("rate_limited", pause)
                        time.sleep(pause)
                        continue
                    last = (
                        f"HTTP 429 after waiting {waited:.0f} s of the {self.rate_limit_wait:g} s "
                        "rate-limit budget"
                    )
                    attempt = self.max_retries  # the budget is spent: give up now
            except openai.APIConnectionError as err:  # includes APITimeoutError
                cause = err.__cause__ or err
                last = self._redact(f"{type(err).__name__}: {cause}")
            else:
                try:
                    return reply.choices[0].message.content or ""
                except (AttributeError, IndexError, TypeError) as err:  # no choices / message in the reply
                    self._count("failed")
                    raise BackendError(
                        f"{self.base_url}: malformed response ({type(err).__name__}: {self._redact(err)})",
                        transient=True,
                    ) from None
            if attempt >= self.max_retries:
                break
            backoff = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            attempt += 1
            self._count("retries")
            time.sleep(max(backoff, wait or 0.0))
        self._count("failed")
        raise BackendError(f"{self.base_url}: gave up after {attempt + 1} attempts ({last})", transient=True)

    def _count(self, key: str, seconds: float = 0.0) -> None:
        with self._stats_lock:
            self.stats[key] += 1
            if seconds:
                self.stats["rate_limit_seconds"] += seconds


def _body(err) -> str:
    try:
        return err.response.text
    except Exception:  # a streamed or closed response: the SDK's own message
        return str(err)


def _retry_after(value: str | None) -> float | None:
    """Seconds a server asked us to wait (numeric Retry-After only), capped at a minute."""
    try:
        return min(60.0, max(0.0, float(value))) if value else None
    except ValueError:
        return None


class Tuned:
    """A backend with fixed settings for every call: a temperature (critics sample, so seats that
    share a model still vote independently) and a cap on reply tokens. Wrap it around the cache so
    the cache key holds the settings actually used."""

    def __init__(self, backend, temperature: float | None = None, max_tokens: int | None = None):
        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.fingerprint = backend.fingerprint

    def complete(self, messages, schema=None, max_tokens=512, temperature=0.0) -> str:
        return self.backend.complete(
            messages,
            schema=schema,
            max_tokens=min(max_tokens, self.max_tokens or max_tokens),
            temperature=temperature if self.temperature is None else self.temperature,
        )
