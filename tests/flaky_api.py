"""A flaky local OpenAI-compatible chat server for load tests (127.0.0.1, port 0).

Each reply waits a latency drawn in [lo, hi] s; then, by a hash of (prompt, attempt), it
answers 429 with Retry-After (or without one), 500, drops the connection, or 200. The fate of
a request's n-th attempt is fixed, so runs are repeatable whatever the thread timing. It counts
requests in flight (and their maximum), every status, and the 200s per prompt, so a test can
check that every request was answered exactly once."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FlakyAPI:
    def __init__(
        self,
        latency=(0.02, 0.12),
        p429=0.15,
        p500=0.10,
        pdrop=0.03,
        retry_after: str | None = "1",
        always_fail: str | None = None,
        fail_code: str = "500",
        echo_key: bool = False,
    ):
        self.latency, self.p429, self.p500, self.pdrop = latency, p429, p500, pdrop
        self.retry_after, self.always_fail, self.fail_code = retry_after, always_fail, fail_code
        self.echo_key = echo_key  # answers "A (your key: <the key sent>)", as careless servers echo it
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.status = Counter()
        self.answered = Counter()  # prompt -> 200 replies
        self.attempts = Counter()  # prompt -> requests

    def fate(self, prompt: str, attempt: int) -> tuple[str, float]:
        h = int(hashlib.sha256(f"{prompt}|{attempt}".encode()).hexdigest()[:12], 16) / 16**12
        lo, hi = self.latency
        lat = lo + (hi - lo) * ((h * 7919) % 1.0)
        if self.always_fail and self.always_fail in prompt:
            return self.fail_code, lat
        for name, p in (("429", self.p429), ("500", self.p500), ("drop", self.pdrop)):
            if h < p:
                return name, lat
            h -= p
        return "200", lat

    def handler(self):
        api = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = body["messages"][-1]["content"]
                prompt = (
                    user if isinstance(user, str) else next(p["text"] for p in user if p["type"] == "text")
                )
                with api.lock:
                    attempt = api.attempts[prompt]
                    api.attempts[prompt] += 1
                    api.in_flight += 1
                    api.max_in_flight = max(api.max_in_flight, api.in_flight)
                fate, lat = api.fate(prompt, attempt)
                try:
                    time.sleep(lat)
                    with api.lock:
                        api.status[fate] += 1
                        if fate == "200":
                            api.answered[prompt] += 1
                    if fate == "drop":
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    code = int(fate)
                    key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    answer = f"A (your key: {key})" if api.echo_key else "A"
                    payload = (
                        {"choices": [{"message": {"role": "assistant", "content": answer}}]}
                        if code == 200
                        else {"error": {"message": "slow down" if code == 429 else "internal error"}}
                    )
                    data = json.dumps(payload).encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if code == 429 and api.retry_after is not None:
                        self.send_header("Retry-After", api.retry_after)
                    self.end_headers()
                    self.wfile.write(data)
                finally:
                    with api.lock:
                        api.in_flight -= 1

        return H

    def __enter__(self) -> str:
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.srv.server_address[1]}/v1"

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()
