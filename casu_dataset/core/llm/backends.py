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

  Bounds against a hostile or broken server (casu_dataset.core.llm.bounded): `timeout` is the
  TOTAL deadline of one HTTP request (connect + headers + whole body, not per read), a request
  past it is a timeout (retried, then a failed request); a response over `max_response_bytes`
  (default 16 MiB), after decompression, which is done here in bounded steps, is a failed request
  (not retried); a reply that is not JSON is a named malformed response. Between 429s the wait is
  at least RATE_LIMIT_FLOOR (0.5 s), growing exponentially with bounded jitter, whatever
  Retry-After says (0 would loop hot); a Retry-After longer than the rest of the budget is cut to
  it, and said so. The URL is shown (errors, logs, fingerprint, cache keys) with any key in it
  masked (`redact_url`: `user:pass@`, `?api_key=`, `&sig=`, ...); the query still reaches the
  server, on every request.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from casu_dataset.core.errors import ModelError

log = logging.getLogger(__name__)


class BackendError(ModelError, RuntimeError):
    """`transient`: this request failed but others may succeed (retries or the rate-limit budget
    ran out, a malformed reply); False when the server refused it as such (401, 403, 404, ...)."""

    def __init__(self, msg: str, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


RATE_LIMIT_WAIT = 300.0  # seconds one request may spend waiting out 429s before it fails
RATE_LIMIT_FLOOR = 0.5  # least pause after a 429, whatever its Retry-After (0 would loop hot)
RATE_LIMIT_MAX_BACKOFF = 30.0  # the exponential pause between 429s stops growing here
RETRY_AFTER_MAX = 60.0  # the most a 5xx's Retry-After is honoured before a retry


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
        max_response_bytes: int | None = None,
    ):
        from casu_dataset.core.llm.bounded import DEFAULT_MAX_RESPONSE_BYTES
        from casu_dataset.core.redact import redact_url, reveal

        real = reveal(base_url) or os.environ.get("CASU_LLM_BASE_URL") or "https://api.openai.com/v1"
        parts = urlsplit(real.strip())
        # The SDK appends the endpoint's path to the base URL's raw path, query and all
        # (`/v1?api_key=Kchat/completions`): the query goes on every request as default_query
        # instead; a fragment is never sent.
        self._endpoint = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
        self._query = dict(parse_qsl(parts.query, keep_blank_values=True))
        # what is shown, logged and hashed: any key in the URL masked (and registered as a secret)
        self.base_url = redact_url(
            urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), parts.query, parts.fragment))
        )
        self.model = model or os.environ.get("CASU_LLM_MODEL")
        if not self.model:
            raise BackendError("openai backend: no model name (pass --llm-model or set CASU_LLM_MODEL)")
        self._key = api_key or os.environ.get("CASU_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or ""
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise BackendError(f"openai backend: timeout must be a number of seconds > 0, got {timeout!r}")
        self.timeout = float(timeout)  # the TOTAL deadline of one request: connect, headers, body
        self.max_response_bytes = int(max_response_bytes or DEFAULT_MAX_RESPONSE_BYTES)
        if self.max_response_bytes < 1:
            raise BackendError(f"openai backend: max_response_bytes must be >= 1, got {max_response_bytes}")
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
        self._said_capped = False

    def __repr__(self) -> str:  # never show the key
        return (
            f"OpenAIBackend({self.base_url!r}, model={self.model!r}, key={'set' if self._key else 'unset'})"
        )

    def _redact(self, text) -> str:
        from casu_dataset.core.redact import redact

        return redact(text, [self._key, *self._query.values()])

    @property
    def client(self):
        """The SDK client, made on first use. Its own retries are off: this class retries (with the
        response_format fallback, the shared semaphore and its own backoff settings). Its HTTP
        client is bounded (total deadline, response size: casu_dataset.core.llm.bounded)."""
        with self._client_lock:
            if self._client is None:
                import openai

                from casu_dataset.core.llm.bounded import bounded_client
                from casu_dataset.core.redact import guard_logging, register_secret

                register_secret(self._key)
                guard_logging()  # the SDK's and httpx's DEBUG logs print raw headers (OPENAI_LOG=debug too)
                # The SDK insists on a key; a keyless local server gets a placeholder that is never
                # sent (the Authorization header is omitted).
                self._client = openai.OpenAI(
                    base_url=self._endpoint,
                    api_key=self._key or "unused",
                    timeout=self.timeout,
                    max_retries=0,
                    default_query=self._query or None,
                    http_client=bounded_client(self.timeout, self.max_response_bytes),
                )
            return self._client

    def _post(self, payload: dict):
        import openai

        no_key = {} if self._key else {"extra_headers": {"Authorization": openai.Omit()}}
        with self.slots:
            return self.client.chat.completions.create(**payload, **no_key)

    def _malformed(self, what: str) -> BackendError:
        self._count("failed")
        return BackendError(f"{self.base_url}: malformed response ({self._redact(what)})", transient=True)

    def complete(
        self,
        messages: list[dict],
        schema: dict | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
    ) -> str:
        import openai

        from casu_dataset.core.llm.bounded import DeadlineExceededError, ResponseBoundError

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
        attempt = 0
        limited_since: float | None = None  # when this request met its first 429
        n429, capped = 0, ""
        self._count("requests")
        while True:
            wait = None
            started = time.monotonic()
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
                    now = time.monotonic()
                    limited_since = started if limited_since is None else limited_since
                    n429 += 1
                    left = self.rate_limit_wait - (now - limited_since)
                    grow = min(
                        RATE_LIMIT_MAX_BACKOFF, max(self.backoff, RATE_LIMIT_FLOOR) * 2 ** min(n429 - 1, 10)
                    )
                    pause = max(RATE_LIMIT_FLOOR, grow * (0.5 + random.random() / 2), wait or 0.0)
                    if wait is not None and wait > max(left, RATE_LIMIT_FLOOR) and not capped:
                        capped = (
                            f"; the server asked Retry-After {wait:g} s, cut to the {max(left, 0):.1f} s "
                            "left of the budget"
                        )
                        if not self._said_capped:
                            self._said_capped = True
                            log.warning(
                                "%s: the server asked Retry-After %g s; waiting at most the %.1f s left of "
                                "the rate_limit_wait budget (said once per backend)",
                                self.base_url,
                                wait,
                                max(left, 0),
                            )
                    if left >= RATE_LIMIT_FLOOR:
                        pause = min(pause, left)
                        self._count("rate_limited", pause)
                        time.sleep(pause)
                        continue
                    last = (
                        f"HTTP 429 {n429} times; {now - limited_since:.1f} s of the "
                        f"{self.rate_limit_wait:g} s rate_limit_wait budget gone, too little left to wait "
                        f"again{capped}"
                    )
                    attempt = self.max_retries  # the budget is spent: give up now
                else:
                    wait = None if wait is None else min(wait, RETRY_AFTER_MAX)
            except openai.APIConnectionError as err:  # includes APITimeoutError
                cause = err.__cause__ or err
                past = time.monotonic() - started >= self.timeout * 0.98
                if isinstance(cause, DeadlineExceededError) or (
                    isinstance(err, openai.APITimeoutError) and past
                ):
                    last = self._deadline_text()
                elif isinstance(cause, ResponseBoundError):
                    raise self._bound_broken(cause, started) from None
                else:
                    last = self._redact(f"{type(err).__name__}: {cause}")
            except DeadlineExceededError:  # a deadline is a timeout: retried, then a failed request
                last = self._deadline_text()
            except ResponseBoundError as err:  # over the size cap: the same reply would come back
                raise self._bound_broken(err, started) from None
            except json.JSONDecodeError as err:  # a 200 whose body is cut short or not JSON
                raise self._malformed(f"not JSON: {err.msg} at character {err.pos}") from None
            except openai.APIResponseValidationError as err:
                raise self._malformed(f"{type(err).__name__}: {err}") from None
            else:
                try:
                    return reply.choices[0].message.content or ""
                except (AttributeError, IndexError, TypeError) as err:  # no choices / message in the reply
                    raise self._malformed(f"{type(err).__name__}: {err}") from None
            if attempt >= self.max_retries:
                break
            backoff = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
            attempt += 1
            self._count("retries")
            time.sleep(max(backoff, wait or 0.0))
        self._count("failed")
        n = f"{attempt + 1} attempts" if attempt else "1 attempt"
        raise BackendError(f"{self.base_url}: gave up after {n} ({last})", transient=True)

    def _deadline_text(self) -> str:
        return f"no complete response within the total deadline, timeout={self.timeout:g} s"

    def _bound_broken(self, err: Exception, started: float) -> BackendError:
        """A response over the size cap or in an encoding not asked for: this request fails."""
        self._count("failed")
        return BackendError(
            f"{self.base_url}: {err} after {time.monotonic() - started:.1f} s", transient=True
        )

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
    """Seconds a server asked us to wait: a number or an HTTP date; None for anything else
    (negative, not finite, unparseable). Not capped here: the caller cuts it to its budget."""
    if not value:
        return None
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        secs = when.timestamp() - time.time()
    return max(0.0, secs) if math.isfinite(secs) else None


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
