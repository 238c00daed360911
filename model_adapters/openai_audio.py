"""An OpenAI-compatible chat endpoint that takes audio as `input_audio` content.

GPT-4o audio models, and any vLLM server serving an audio LM (the fast path for big
models: `vllm serve Qwen/Qwen2-Audio-7B-Instruct`). The harness keeps `concurrency` requests
in flight whatever --batch_size is; transient errors (408/409/5xx, timeouts, dropped
connections) are retried with exponential backoff and jitter (`max_retries`), a 429 is waited
out (its Retry-After, but never less than 0.5 s and growing, else backoff) within
`rate_limit_wait` seconds per request without counting as a retry, and a request that still
fails is a failed sample (reported with its sample id, retried by the next run), not the end of
the run. 401/403/404 stop the run: no request can succeed.

Bounds: `timeout` is the TOTAL deadline of one request (connect + headers + the whole body; a
server trickling its reply is cut there), `max_response_bytes` (default 16 MiB) caps the reply
after decompression (a gzip bomb stops at the cap), a reply that is not JSON is a named
malformed response. Each is a failed request, named with the server and the sample id.

The key comes from the environment (`api_key_env`, default OPENAI_API_KEY) and is sent only in
the Authorization header. A server that wants its key in the URL (`base_url=...?api_key=KEY`,
`&sig=...`) gets it on every request, but the URL is recorded, logged and shown with the key
masked (`redact.SecretURL`), in results, sample logs, errors and cache keys; credentials as
`user:key@` in `base_url` are refused. The HTTP client is the `openai` SDK (through
casu_dataset.core.llm.backends.OpenAIBackend).
"""

from __future__ import annotations

import base64
import io
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from model_adapters.base import Adapter, AdapterError, GenerationSettings, ModelArgsError, Request


def wav16_b64(audio: np.ndarray, sr: int) -> str:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(audio, -1, 1), sr, format="WAV", subtype="PCM_16")
    return base64.b64encode(buf.getvalue()).decode()


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY_SHAPE = re.compile(r"(sk-|hf_|gsk_|xai-|AIza)|(?=.*[a-z])(?=.*[A-Z])(?=.*\d).{24,}")


def _check_secret_args(base_url: str | None, api_key_env: str) -> None:
    """Refuse the two slips that would write a key into every results file: credentials inside
    `base_url`, and the key itself given as `api_key_env` (which names the variable holding it).
    Neither message repeats the secret."""
    from casu_dataset.core.redact import register_secret, reveal, url_without_userinfo

    base_url = reveal(base_url)
    if base_url and re.search(r"://[^/?#@\s]*@", base_url):
        raise ModelArgsError(
            f"--model_args base_url={url_without_userinfo(base_url)}: holds credentials (user:key@), which "
            "would be written into the results; give the URL without them and the key in the "
            "environment variable named by api_key_env (default OPENAI_API_KEY)"
        )
    if not _ENV_NAME.fullmatch(api_key_env or "") or _KEY_SHAPE.match(api_key_env):
        register_secret(api_key_env)  # masked wherever it might still be printed
        raise ModelArgsError(
            f"--model_args api_key_env: {len(api_key_env or '')} characters that look like a key, not the "
            "NAME of an environment variable; export the key (export OPENAI_API_KEY=...) and give "
            "api_key_env=OPENAI_API_KEY (the default) or your variable's name"
        )


def _sample(req: Request) -> str:
    return f"sample {req.id}: " if req.id else ""


class OpenAIAudio(Adapter):
    """OpenAI-compatible chat API with `input_audio` (GPT-4o audio, vLLM audio servers)."""

    name = "openai-audio"
    max_audio_seconds = 600.0
    chat_template_use = "always"
    chat_template_how = "is a chat API: the server applies its chat template (no named templates from here)"
    limits_in_flight = True  # OpenAIBackend's semaphore: at most `concurrency` requests on the wire

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 4,
        timeout: float = 120.0,
        max_retries: int = 4,
        backoff: float = 1.0,
        system_prompt: str | None = None,
        rate_limit_wait: float = 300.0,
        max_response_bytes: int = 16 * 1024 * 1024,
    ):
        from casu_dataset.core.redact import reveal

        _check_secret_args(base_url, api_key_env)
        # recorded (results, fingerprint, cache keys) with any key in the URL masked (the base
        # class keeps it as a SecretURL); sent whole
        super().__init__(model=model, base_url=base_url, api_key_env=api_key_env)
        from casu_dataset.core.llm.backends import BackendError, OpenAIBackend

        if concurrency < 1:
            raise ValueError(f"openai-audio: concurrency must be >= 1, got {concurrency}")
        try:
            self.api = OpenAIBackend(
                reveal(base_url) or os.environ.get("OPENAI_BASE_URL"),
                model,
                api_key=os.environ.get(api_key_env, ""),
                timeout=timeout,
                max_retries=max_retries,
                backoff=backoff,
                concurrency=int(concurrency),
                rate_limit_wait=float(rate_limit_wait),
                max_response_bytes=int(max_response_bytes),
            )
        except BackendError as err:
            raise AdapterError(f"--model openai-audio: {err} (--model_args model=NAME)") from None
        self.concurrency = int(concurrency)
        self.system_prompt = system_prompt

    def messages(self, req: Request) -> list[dict]:
        content = []
        if req.audio is not None:
            content.append(
                {
                    "type": "input_audio",
                    "input_audio": {"data": wav16_b64(req.audio, self.sample_rate), "format": "wav"},
                }
            )
        content.append({"type": "text", "text": req.prompt})
        system = req.system if req.system is not None else self.system_prompt
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": content}
        ]

    def _one(self, req: Request, settings: GenerationSettings) -> str:
        from casu_dataset.core.llm.backends import BackendError

        try:
            return self.api.complete(
                self.messages(req),
                max_tokens=settings.max_new_tokens,
                temperature=settings.temperature if settings.do_sample else 0.0,
            )
        except BackendError as err:
            if err.transient:  # this request failed; the server works: a failed sample, the run goes on
                # not an AdapterError: the harness records the sample as failed, does not cache it,
                # and goes on
                raise BackendError(f"openai-audio: {_sample(req)}{err}", transient=True) from None
            raise AdapterError(f"openai-audio: {err}") from None  # a refused key or model stops the run

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests) or 1)) as pool:
            return list(pool.map(lambda r: self._one(r, settings), requests))
