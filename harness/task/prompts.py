"""Prompts from a task's template: question, lettered options, optional scene hint."""

from __future__ import annotations

from harness.scoring.parsing import LETTERS


def scene_hint(place: str) -> str:
    """The paper's hint (section 4.4): "This audio is recorded in a [place]." """
    p = place.strip().replace("_", " ")
    article = "an" if p[:1].lower() in "aeiou" else "a"
    return f"This audio is recorded in {article} {p}.\n"


def rotate(options: list[str], answer: str, r: int) -> tuple[list[str], str]:
    """Options shifted by r places (CircularEval) and where the key lands."""
    k = len(options)
    rot = options[r % k :] + options[: r % k]
    key = options[LETTERS.index(answer)]
    return rot, LETTERS[rot.index(key)]


def build_prompt(
    template: str, question: str = "", options: list[str] | None = None, place: str | None = None
) -> str:
    opts = options or []
    return template.format(
        question=question,
        hint=scene_hint(place) if place else "",
        options="\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(opts)),
        letters=", ".join(LETTERS[: len(opts)]),
    )
