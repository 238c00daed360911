"""Multiple-choice answer extraction in layers; what cannot be parsed is counted, never guessed.

1. a strict letter pattern ("B", "B. 4", "(c)", "ANSWER: B", "The answer is B", "**B**");
2. the text of exactly one option appearing in the reply;
3. optionally an LLM judge that maps the reply to one letter or to "none".
A reply naming two different letters, or matching two options, is unparsed (and wrong).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from casu_dataset.contract import LETTERS  # re-exported for prompts, runner


@dataclass(frozen=True)
class Parsed:
    letter: str | None
    method: str  # "letter", "option_text", "judge", "unparsed"


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^\w\s]", " ", s.lower())).strip()


def _letter_patterns(k: int) -> list[re.Pattern]:
    L = LETTERS[:k]
    cls = f"[{L}{L.lower()}]"
    return [
        # "Answer: B", "ANSWER: (b)", "The answer is B", "correct option is: **C**"
        # (a lower-case letter only before punctuation or the end: "Answer: a siren" is not A)
        re.compile(
            rf"(?i:answer|option|choice)\s*(?i:is|:)?\s*[:\-]?\s*[\*\(\[]*\s*"
            rf"([{L}](?![\w'])|[{L.lower()}](?=\s*(?:$|[\.\):\],;\*])))"
        ),
        # the reply starts with the letter: "B", "B.", "B)", "(c)", "**B**", "B: text", "B. 4"
        re.compile(rf"^\s*[\*\(\[]*\s*({cls})\s*[\*\)\]]*\s*(?:[\.\):\-,]|$)", re.I),
        # a letter alone in brackets anywhere: "(C)"
        re.compile(rf"\(({cls})\)"),
        # a bare capital letter as a whole word, e.g. "I think B." (capital only: 'a' is a word)
        re.compile(rf"(?<![\w'])([{L}])(?![\w'])"),
    ]


def parse_letter(text: str, k: int) -> str | None:
    """The letter a reply names, by the first pattern layer that matches; None if none or ambiguous."""
    for pat in _letter_patterns(k):
        found = {m.group(1).upper() for m in pat.finditer(text) if m.group(1)}
        if len(found) == 1:
            return found.pop()
        if len(found) > 1:
            return None  # two letters at the same level of confidence: do not pick one
    return None


def parse_option_text(text: str, options: list[str]) -> str | None:
    t = f" {_norm(text)} "
    hits = [i for i, o in enumerate(options) if _norm(o) and f" {_norm(o)} " in t]
    if len(hits) > 1:  # one option's text inside another's: keep the longest if it contains the rest
        longest = max(hits, key=lambda i: len(_norm(options[i])))
        if all(_norm(options[i]) in _norm(options[longest]) for i in hits):
            hits = [longest]
    return LETTERS[hits[0]] if len(hits) == 1 else None


def parse_choice(text: str | None, options: list[str], judge=None, question: str = "") -> Parsed:
    """The option a reply chose: a letter, else an option's text, else the judge's reading; no
    reply (None) or a blank one is unparsed."""
    k = len(options)
    if not text or not text.strip():
        return Parsed(None, "unparsed")
    letter = parse_letter(text, k)
    if letter:
        return Parsed(letter, "letter")
    letter = parse_option_text(text, options)
    if letter:
        return Parsed(letter, "option_text")
    if judge is not None:
        letter = judge(question, options, text)
        if letter:
            return Parsed(letter, "judge")
    return Parsed(None, "unparsed")


class LLMJudge:
    """Ask a chat backend (casu_dataset.core.llm.backends) which option a reply chose; 'none' stays
    unparsed."""

    PROMPT = (
        "A model answered a multiple-choice question. Which option did it choose? Reply with the option's "
        "letter only, or NONE if it chose none or several.\n\nQuestion: {q}\nOptions:\n{opts}\n\n"
        "Model reply: {reply}\n\nChosen letter:"
    )

    def __init__(self, backend):
        self.backend = backend
        self.fingerprint = backend.fingerprint

    def __call__(self, question: str, options: list[str], reply: str) -> str | None:
        opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))
        out = self.backend.complete(
            [{"role": "user", "content": self.PROMPT.format(q=question, opts=opts, reply=reply)}],
            max_tokens=4,
        )
        m = re.match(rf"\s*\(?([{LETTERS[: len(options)]}])\b", out.strip().upper())
        return m.group(1) if m else None
