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


def row_doc(row, rotation: int = 0) -> dict:
    """A dataset row as lm-eval's `doc`: every column by name (the audio aside), as stored. Under
    --circular, rotation r is the row as if it had been stored with its options shifted r places:
    `options` rotated and `answer` (the key's letter) moved with its option; no other column
    changes."""
    doc = {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name not in ("audio", "extra")}
    doc.update(row.extra or {})
    answer, options = doc.get("answer"), doc.get("options")
    if (
        rotation
        and options
        and isinstance(answer, str)
        and len(answer) == 1
        and answer in LETTERS[: len(options)]
    ):
        doc["options"], doc["answer"] = rotate(list(options), answer, rotation)
    return doc


def template_doc(row, rotation: int = 0, place: str | None = None) -> dict:
    """What an lm-eval-style task's templates see: the row (row_doc), plus two documented extras
    that never hide a column of that name: `hint` (the scene hint with --scene_hint, else "") and
    `choices` (the row's `options` under the column name of lm-eval's mmlu template)."""
    doc = row_doc(row, rotation)
    doc.setdefault("hint", scene_hint(place) if place else "")
    if "options" in doc:
        doc.setdefault("choices", doc["options"])
    return doc


def rotations(task, row, circular: bool) -> int:
    """How many requests a row is asked as: one, or under --circular one per place its options
    can shift to (the row's options; for a CASU task, those it offers)."""
    if not circular or task.output_type != "multiple_choice":
        return 1
    return max(1, len(row.options or []))


def item(task, row, rotation: int = 0) -> tuple[list[str], str, str | None]:
    """(options, key letter, reference) of one row for `task`, as asked at `rotation`: the row's own
    options rotated, or those its lm-eval-style templates give over the rotated row (doc_to_choice,
    doc_to_target). LmEvalYamlError names the field."""
    if not task.is_lmeval_style:
        if task.output_type != "multiple_choice":
            return [], "", None
        opts, key = rotate(list(row.options), row.answer, rotation)
        return opts, key, None
    doc = template_doc(row, rotation)
    if task.output_type != "multiple_choice":
        ref = None
        if task.doc_to_target is not None:
            ref = lmeval_yaml.render(str(task.doc_to_target), doc, "doc_to_target")
        return [], "", ref
    opts = lmeval_yaml.choices(task.doc_to_choice, doc)
    if len(opts) > len(LETTERS):
        raise lmeval_yaml.LmEvalYamlError(f"doc_to_choice: {len(opts)} choices; at most {len(LETTERS)}")
    return opts, lmeval_yaml.target_letter(task.doc_to_target, doc, opts), None


def task_prompt(task, row, options: list[str], place: str | None = None, rotation: int = 0) -> str:
    """The prompt of one request: CASU's template with `options` (as asked), or the task's
    doc_to_text over the row at `rotation` (template_doc: the row's columns, `hint`, `choices`)."""
    if not task.is_lmeval_style:
        return build_prompt(task.prompt_template, row.question, options, place)
    return lmeval_yaml.render(task.doc_to_text, template_doc(row, rotation, place), "doc_to_text")
