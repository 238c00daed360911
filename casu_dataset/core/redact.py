"""Remove secrets (API keys, bearer tokens, Hub tokens) from text before it is shown or logged.

Servers often echo the key they were sent in a 401 body ("Incorrect API key provided: sk-..."),
or only part of it ("key ending SECRET123"), so every error line built from a server reply, and
every error the CLIs print, goes through `redact`. Three nets: any run of 4+ characters of a
known secret standing as a word, or of 8+ inside a longer word (the values of the key variables
this toolkit reads, and keys passed in), the
shapes keys have (`Bearer ...`, `sk-...`, `hf_...`, `key=...`), and `guard_logging`, which keeps
the HTTP clients' debug logs (raw request and response headers and bodies) off at every
verbosity and passes every log record through `redact`.

URLs carry keys too (`https://user:KEY@host`, `?api_key=KEY`, `&sig=...`, `#access_token=...`):
`redact_url` masks them, `redact` masks them in any text, and `SecretURL` is a URL whose
printed, logged, hashed and JSON-written form is the redacted one while `reveal` gives the
real one to the HTTP client that must send it."""

from __future__ import annotations

import logging
import os
import re

SECRET_ENV = ("CASU_LLM_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY")
MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter values ("x", "1") are not secrets: they would mask ordinary words
MIN_FRAGMENT = 4  # a run this long of a known secret is masked wherever it appears (heads, tails)

_PATTERNS = [  # (pattern, replacement): the label before a secret is kept, the secret is not
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 " + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (
        re.compile(
            r"(?i)\b((?:api[_-]?key|access[_-]?token|token|secret|password)[\"']?\s*[:=]\s*[\"']?)"
            r"[A-Za-z0-9._~+/-]{8,}"
        ),
        r"\1" + MASK,
    ),
]
# A URL's userinfo (`user:password@`), and a query or fragment parameter with a key-like name:
# the value is masked, the name kept. Names: any word (split on - _ .) of these, or a name ending
# in one (`x-amz-signature`, `client_secret`, `apikey`).
_KEY_WORDS = (
    "key|apikey|api_key|api-key|token|access_token|id_token|refresh_token|auth|authorization|"
    "sig|signature|secret|client_secret|password|passwd|pwd|pass|credential|credentials|session"
)
_URL_USERINFO = re.compile(r"(?<=://)[^/?#@\s]*@")
_URL_PARAM = re.compile(  # the value: up to the next parameter, a blank or a quote, less trailing : , .
    rf"(?i)([?&;#](?:[A-Za-z0-9.~%_-]*[_.-])?(?:{_KEY_WORDS})=)(?!\[REDACTED\])"
    r"[^&;#\s\"'<>()]+?(?=[:,.]*(?:[&;#\s\"'<>()]|$))"
)
_EXTRA: set[str] = set()  # keys passed in by code (register_secret), masked like the env's
# HTTP client loggers that print raw headers and bodies at DEBUG (httpcore: header tuples;
# openai: request options with headers; httpx/urllib3: request lines)
HTTP_LOGGERS = (
    "httpx",
    "httpcore",
    "httpx2",  # the openai SDK's client since it moved to httpx2 / httpcore2
    "httpcore2",
    "openai",
    "urllib3",
    "requests",
    "huggingface_hub.utils._http",
)


def register_secret(value: str | None) -> None:
    """A key this process uses that is not in the environment (e.g. a --model_args api key)."""
    if value and len(value) >= MIN_SECRET_LEN:
        _EXTRA.add(value)


def _env_secrets() -> list[str]:
    vals = [os.environ.get(k, "") for k in SECRET_ENV]
    vals += [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and k not in SECRET_ENV]
    return [v for v in [*vals, *_EXTRA] if len(v) >= MIN_SECRET_LEN]


GLUED_MIN = 8  # a shorter run inside a longer word ("correct" in "Incorrect") is that word, not a key


def _fragments(s: str, secret: str) -> list[tuple[int, int]]:
    """Spans of `s` that are runs of MIN_FRAGMENT+ characters of `secret` (longest at each
    start): standing as a word of their own, or at least GLUED_MIN long anywhere."""
    grams = {secret[i : i + MIN_FRAGMENT] for i in range(len(secret) - MIN_FRAGMENT + 1)}
    spans, i = [], 0
    while i <= len(s) - MIN_FRAGMENT:
        if s[i : i + MIN_FRAGMENT] in grams:
            j = i + MIN_FRAGMENT
            while j < len(s) and s[i : j + 1] in secret:
                j += 1
            glued = (i > 0 and s[i - 1].isalnum()) or (j < len(s) and s[j].isalnum())
            if not glued or j - i >= GLUED_MIN:
                spans.append((i, j))
                i = j
            else:
                i += 1
        else:
            i += 1
    return spans


def redact_known(text: str) -> str:
    """`text` with the secrets this process knows (the key variables' values, registered keys) and
    their 4+ character runs masked, but no key-shaped pattern: for a model's own output, which may
    say "token=..." innocently but must never carry a key a server echoed into the logs or cache."""
    s = str(text)
    for v in sorted(set(_env_secrets()), key=len, reverse=True):
        for a, b in reversed(_fragments(s, v)):
            s = s[:a] + MASK + s[b:]
    return s


def url_without_userinfo(url: str) -> str:
    """`url` with any `user:password@` replaced by the mask (for messages about a URL)."""
    return _URL_USERINFO.sub(MASK + "@", str(url))


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries: its userinfo's password (or user, without one) and the values of
    its key-like query and fragment parameters."""
    out = []
    m = _URL_USERINFO.search(str(url))
    if m:
        user, _, password = m.group(0)[:-1].partition(":")
        out.append(password or user)
    out += [m.group(0)[len(m.group(1)) :] for m in _URL_PARAM.finditer(str(url))]
    return [x for x in out if x]


def redact_url(url) -> str:
    """`url` with its userinfo and the values of key-like query / fragment parameters masked
    (`http://h/v1?api_key=[REDACTED]&api-version=2024`): the form to print, log, record and hash.
    Also registers those values (`register_secret`), so that they are masked in any later text."""
    s = str(url)
    for secret in url_secrets(s):
        register_secret(secret)
    return _URL_PARAM.sub(r"\1" + MASK, url_without_userinfo(s))


class SecretURL(str):
    """A URL holding a secret: as a string (printed, logged, formatted, written as JSON, hashed
    into a cache key) it IS the redacted URL; `reveal(x)` returns the real one, for the HTTP
    client only. Any string operation on it yields the redacted text, so a slip loses the key
    (the request is refused) instead of writing it down."""

    __slots__ = ("_real",)
    _real: str

    def __new__(cls, url: str) -> "SecretURL":
        real = reveal(url)
        self = super().__new__(cls, redact_url(real))
        self._real = real
        return self

    def __copy__(self) -> "SecretURL":  # immutable: a copy (copy.copy, deepcopy) is itself
        return self

    def __deepcopy__(self, memo) -> "SecretURL":
        return self

    def __reduce__(self):  # serialized (pickle, yaml.dump) as the redacted string: never the key
        return (str, (str(self),))


def _yaml_as_str() -> None:
    """yaml.safe_dump writes a SecretURL as the string it is (the redacted URL), not an error."""
    try:
        import yaml
    except ImportError:
        return
    for dumper in (yaml.SafeDumper, yaml.Dumper):
        dumper.add_representer(SecretURL, lambda d, v: d.represent_str(str(v)))


_yaml_as_str()


def reveal(value):
    """The real value behind a SecretURL; anything else unchanged."""
    return value._real if isinstance(value, SecretURL) else value


def protect_url(value):
    """A string URL that holds a secret as a SecretURL; anything else unchanged."""
    if isinstance(value, str) and not isinstance(value, SecretURL) and url_secrets(value):
        return SecretURL(value)
    return value


def redact(text, secrets=()) -> str:
    """`text` with every known secret, every 4+ character run of one, and every key-shaped
    string replaced by [REDACTED]."""
    s = str(text)
    known = {*(x for x in secrets if x and len(x) >= MIN_SECRET_LEN), *_env_secrets()}
    for v in sorted(known, key=len, reverse=True):
        spans = _fragments(s, v)
        for a, b in reversed(spans):
            s = s[:a] + MASK + s[b:]
    for pattern, repl in _PATTERNS:
        s = pattern.sub(repl, s)
    return _URL_PARAM.sub(r"\1" + MASK, url_without_userinfo(s))


class RedactingFilter(logging.Filter):
    """Masks secrets in every record a handler emits (message and arguments, formatted once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to logging's own error
            return True
        clean = redact(msg)
        if clean != msg:
            record.msg, record.args = clean, ()
        return True


def guard_logging() -> None:
    """HTTP client loggers at WARNING or above whatever the verbosity (their DEBUG lines hold raw
    headers, where a key sits or is echoed), and a RedactingFilter on every root handler."""
    for name in HTTP_LOGGERS:
        lg = logging.getLogger(name)
        if lg.getEffectiveLevel() < logging.WARNING or lg.level < logging.WARNING:
            lg.setLevel(logging.WARNING)
    root = logging.getLogger()
    for h in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
