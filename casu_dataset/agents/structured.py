"""Ask a chat backend for JSON that validates against a pydantic model, with bounded retries.

The reply may wrap JSON in prose or a ``` fence; the first balanced {...} object is parsed.
Invalid JSON or a schema violation is fed back to the model and asked again; a refusal is
recognised and retried too. After `retries` failed attempts a StructuredOutputError lists
what each attempt got wrong, so a pipeline can count and report it instead of crashing.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ValidationError

from casu_dataset.core.errors import ModelError

REFUSAL = re.compile(
    r"\b(i can(?:no|')t|i am unable|i'm unable|i won't|as an ai|i'm sorry, but|i am sorry, but)\b", re.I
)


class StructuredOutputError(ModelError, ValueError):
    # caught by name: the agents retry, skip or report an agent that gave no valid output

    def __init__(self, what: str, attempts: list[str]):
        super().__init__(f"{what}: no valid output after {len(attempts)} attempts: " + " | ".join(attempts))
        self.attempts = attempts


def extract_json(text: str):
    """The first balanced JSON object in text (fences and surrounding prose ignored)."""
    start = text.find("{")
    while start >= 0:
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            c = text[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    try:
                        return json.loads(text[start : i + 1])
                    except json.JSONDecodeError:
                        break
        start = text.find("{", start + 1)
    raise ValueError("no JSON object found")


def ask_json(
    backend,
    messages: list[dict],
    model: type[BaseModel],
    what: str,
    retries: int = 3,
    max_tokens: int = 512,
    check=None,
):
    """Validated reply; `check(obj)` may convert it further and raise ValueError to retry."""
    schema = model.model_json_schema()
    convo = list(messages)
    problems: list[str] = []
    for _ in range(retries):
        text = backend.complete(convo, schema=schema, max_tokens=max_tokens)
        try:
            if REFUSAL.search(text) and "{" not in text:
                raise ValueError(f"refusal: {text.strip()[:80]!r}")
            obj = model.model_validate(extract_json(text))
            return check(obj) if check else obj
        except (ValueError, ValidationError) as err:
            msg = (
                str(err).splitlines()[0]
                if not isinstance(err, ValidationError)
                else "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()[:3])
            )
            problems.append(msg)
            convo = convo + [
                {"role": "assistant", "content": text},
                {
                    "role": "user",
                    "content": "That reply was not valid: "
                    + msg
                    + ". Reply with only a JSON object matching this schema: "
                    + json.dumps(schema),
                },
            ]
    raise StructuredOutputError(what, problems)
