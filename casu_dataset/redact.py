"""Remove secrets (API keys, bearer tokens, Hub tokens) from text before it is shown or logged.

Servers often echo the key they were sent in a 401 body ("Incorrect API key provided: sk-..."),
so every error line built from a server reply, and every error the CLIs print, goes through
`redact`. Two nets: the values of the key variables this toolkit reads (whatever they look
like), and the shapes keys have (`Bearer ...`, `sk-...`, `hf_...`, `key=...`)."""
from __future__ import annotations

import os
import re

SECRET_ENV = ("CASU_LLM_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY")
MASK = "[REDACTED]"
MIN_SECRET_LEN = 6  # shorter values ("x", "1") would mask ordinary words

_PATTERNS = [  # (pattern, replacement): the label before a secret is kept, the secret is not
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 " + MASK),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), MASK),
    (re.compile(r"(?i)\b((?:api[_-]?key|access[_-]?token|token|secret|password)[\"']?\s*[:=]\s*[\"']?)"
                r"[A-Za-z0-9._~+/-]{8,}"), r"\1" + MASK),
]


def _env_secrets() -> list[str]:
    vals = [os.environ.get(k, "") for k in SECRET_ENV]
    vals += [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and k not in SECRET_ENV]
    return [v for v in vals if len(v) >= MIN_SECRET_LEN]


def redact(text, secrets=()) -> str:
    """`text` with every known secret value and every key-shaped string replaced by [REDACTED]."""
    s = str(text)
    for v in sorted({*(x for x in secrets if x and len(x) >= MIN_SECRET_LEN), *_env_secrets()}, key=len,
                    reverse=True):
        s = s.replace(v, MASK)
    for pattern, repl in _PATTERNS:
        s = pattern.sub(repl, s)
    return s
