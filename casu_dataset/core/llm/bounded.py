"""Bounds on one HTTP exchange with an API server, as an httpx2 transport for the `openai` SDK.

httpx's timeouts are per operation (each connect, each read): a server that trickles its body a
byte a second never trips a 10 s read timeout, and a small gzip body may inflate to gigabytes in
one decoder call. `BoundedTransport` adds the two bounds a hostile or broken server needs:

- a total deadline per request, connect + headers + whole body: every socket operation's timeout
  is clamped to what is left of it (a network backend wrapped around httpcore's), and the body
  stream checks it between chunks, so a request ends within the deadline plus one scheduling
  slice, whatever the server does;
- a response-size cap: a Content-Length above it is refused before the body is read, the raw
  body is counted as it arrives, and gzip / deflate bodies are decompressed here, in bounded
  steps (64 KiB of output at a time), and stopped at the cap; another Content-Encoding is refused
  (we ask for gzip and deflate only).

It raises `DeadlineExceededError`, or a `ResponseBoundError` for a body over the cap or in an
encoding not asked for (the caller names the server and the request); the SDK passes them through
or wraps them as the `__cause__` of its connection error. Environment proxies (HTTPS_PROXY, ...)
are honoured, each through a bounded transport.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from typing import cast

import httpcore2
import httpx2

from casu_dataset.core.errors import ModelError

DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
_STEP = 64 * 1024  # decompressed bytes produced per decoder call: memory stays bounded
_ENCODINGS = {"gzip", "x-gzip", "deflate"}


class ResponseBoundError(ModelError, RuntimeError):
    """A response broke a bound; the message says which, without the URL (the caller adds it:
    OpenAIBackend turns it into a BackendError naming the server)."""


class DeadlineExceededError(ResponseBoundError):
    """No complete response by the total deadline: a timeout, which the backend retries (a body
    over the size cap would come back the same, so it is not)."""


_local = threading.local()  # .deadline: time.monotonic() by which this thread's request must end


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    """`timeout` clamped to what is left of this thread's deadline; `exc` once it has passed."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc("total deadline exceeded")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore2.NetworkStream:
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout))
        )

    def get_extra_info(self, info: str):
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore's network backend with every connect, read and write timeout clamped to the
    deadline of the request the calling thread is making."""

    def __init__(self, inner: httpcore2.NetworkBackend):
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        t = _left(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, t, local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        t = _left(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, t, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _inflate(chunks: Iterable[bytes], encoding: str) -> Iterator[bytes]:
    """Decompress a gzip / deflate stream in steps of at most _STEP output bytes."""
    # gzip and zlib-wrapped deflate by their headers; raw deflate (some servers) as a fallback
    d = zlib.decompressobj(32 + zlib.MAX_WBITS)
    first = True
    for chunk in chunks:
        data = chunk
        while data:
            try:
                out = d.decompress(data, _STEP)
            except zlib.error as err:
                if first and encoding == "deflate":
                    d, first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise ResponseBoundError(f"a {encoding} body that does not decompress ({err})") from None
            first = False
            if out:
                yield out
            data = d.unconsumed_tail
            if not data and len(out) == _STEP:
                data = b""  # the output buffer was full: drain what zlib still holds
                while True:
                    out = d.decompress(b"", _STEP)
                    if out:
                        yield out
                    if len(out) < _STEP:
                        break
    tail = d.flush(_STEP)
    if tail:
        yield tail


class _BoundedBody(httpx2.SyncByteStream):
    def __init__(self, inner: httpx2.SyncByteStream, deadline: float, cap: int, encodings: list[str]):
        self._inner, self._deadline, self._cap, self._encodings = inner, deadline, cap, encodings

    def _raw(self) -> Iterator[bytes]:
        n = 0
        for chunk in self._inner:
            n += len(chunk)
            if n > self._cap:
                raise ResponseBoundError(
                    f"response body over the {_size(self._cap)} cap (max_response_bytes)"
                )
            if time.monotonic() > self._deadline:
                raise DeadlineExceededError("total deadline exceeded while the body arrived")
            yield chunk

    def __iter__(self) -> Iterator[bytes]:
        data: Iterable[bytes] = self._raw()
        for enc in reversed(self._encodings):  # listed in the order they were applied
            data = _inflate(data, enc)
        n = 0
        for chunk in data:
            n += len(chunk)
            if n > self._cap:
                raise ResponseBoundError(
                    f"response body inflates past the {_size(self._cap)} cap (max_response_bytes; "
                    f"Content-Encoding {', '.join(self._encodings)})"
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n} bytes"


class BoundedTransport(httpx2.BaseTransport):
    """An HTTPTransport (optionally through a proxy) whose every request ends within `total`
    seconds and whose response body, decompressed, is at most `max_bytes`."""

    def __init__(self, total: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, proxy=None):
        self.total = float(total)
        self.max_bytes = int(max_bytes)
        # the openai SDK's own limits (its default client's), so that its behaviour is unchanged
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)
        self._inner = httpx2.HTTPTransport(proxy=proxy, limits=limits)
        pool = getattr(self._inner, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is not None and backend is not None:
            pool._network_backend = _DeadlineBackend(backend)
        else:  # an httpx2 that builds its pool otherwise (tests/test_api_bounds.py says so): the
            # body is still bounded between chunks, connect and headers only per operation
            logging.getLogger(__name__).warning(
                "httpx2 %s: no network backend to bound; the total deadline covers the body only",
                httpx2.__version__,
            )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = time.monotonic() + self.total
        _local.deadline = deadline
        request.headers["Accept-Encoding"] = "gzip, deflate"
        response = self._inner.handle_request(request)
        try:
            length = response.headers.get("Content-Length")
            if length and length.strip().isdigit() and int(length) > self.max_bytes:
                raise ResponseBoundError(
                    f"response of {_size(int(length))} (Content-Length) over the {_size(self.max_bytes)} "
                    "cap (max_response_bytes)"
                )
            encodings = [
                e.strip().lower()
                for e in response.headers.get("Content-Encoding", "").split(",")
                if e.strip() and e.strip().lower() != "identity"
            ]
            bad = [e for e in encodings if e not in _ENCODINGS]
            if bad:
                raise ResponseBoundError(
                    f"a response in Content-Encoding {', '.join(bad)} (asked for gzip, deflate)"
                )
        except ResponseBoundError:
            response.close()
            raise
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if not (encodings and k.lower() in ("content-encoding", "content-length"))
        ]
        stream = cast(httpx2.SyncByteStream, response.stream)  # a sync transport's: always one
        return httpx2.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(stream, deadline, self.max_bytes, encodings),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


def bounded_client(total: float, max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> httpx2.Client:
    """An httpx2 client for the openai SDK: every request bounded by `total` seconds (the
    per-operation timeouts the SDK sets stay, clamped to it) and `max_bytes`; environment proxies
    honoured, each through its own bounded transport."""
    try:
        from httpx2._utils import get_environment_proxies

        proxies = get_environment_proxies()
    except Exception:  # noqa: BLE001 - no proxy support in this httpx2: direct connections
        proxies = {}
    mounts: dict[str, httpx2.BaseTransport | None] = {
        key: None if url is None else BoundedTransport(total, max_bytes, proxy=httpx2.Proxy(url))
        for key, url in proxies.items()
    }
    return httpx2.Client(
        transport=BoundedTransport(total, max_bytes),
        mounts=mounts,
        timeout=httpx2.Timeout(total),
        follow_redirects=True,
    )
