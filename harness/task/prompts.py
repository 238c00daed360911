"""Prompts from a task's template: question, lettered options, optional scene hint; for a task
written the lm-eval way, its Jinja templates over the row's columns (task/lmeval_yaml.py)."""

from __future__ import annotations

import dataclasses

from harness.scoring.parsing import LETTERS
from harness.task import lmeval_yaml


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


def row_doc(row) -> dict:
    """A dataset row as lm-eval's `doc`: every column by name (the audio aside)."""
    doc = {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name not in ("audio", "extra")}
    doc.update(row.extra or {})
    return doc


def item(task, row) -> tuple[list[str], str, str | None]:
    """(options, key letter, reference) of one row for `task`: the row's own, or those its
    lm-eval-style templates give (doc_to_choice, doc_to_target). LmEvalYamlError names the field."""
    if not task.is_lmeval_style:
        return list(row.options), row.answer, None
    doc = row_doc(row)
    if task.output_type != "multiple_choice":
        ref = None
        if task.doc_to_target is not None:
            ref = lmeval_yaml.render(str(task.doc_to_target), doc, "doc_to_target")
        return [], "", ref
    opts = lmeval_yaml.choices(task.doc_to_choice, doc)
    if len(opts) > len(LETTERS):
        raise lmeval_yaml.LmEvalYamlError(f"doc_to_choice: {len(opts)} choices; at most {len(LETTERS)}")
    return opts, lmeval_yaml.target_letter(task.doc_to_target, doc, opts), None


def task_prompt(task, row, options: list[str], place: str | None = None) -> str:
    """The prompt of one request: CASU's template, or the task's doc_to_text over the row's columns
    with `options` / `choices` (as asked: rotated under --circular) and `hint` (the scene hint)."""
    if not task.is_lmeval_style:
        return build_prompt(task.prompt_template, row.question, options, place)
    doc = row_doc(row)
    if task.output_type == "multiple_choice":
        doc.update(options=options, choices=options)
    doc["hint"] = scene_hint(place) if place else ""
    return lmeval_yaml.render(task.doc_to_text, doc, "doc_to_text")
