"""Contrast families (CASU v2): four variants that share the question text and the four options,
each option the key of exactly one variant. Authoring format: FAMILIES.md beside this file.

`compile_families` turns each authored family into four scene scripts (ids `FAMILY.VARIANT`) and
four questions per covered task, with one option order per question (a deterministic shuffle),
so the keys of a question over its four variants are a permutation of A-D by construction.
Every error names the file, the family and the field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from casu_dataset.contract import DATASET_LETTERS as LETTERS
from casu_dataset.core import strict_yaml
from casu_dataset.scenarios import FAMILY_LIBRARY_DIR
from casu_dataset.script.scenes import LAYER_NAMES, LibraryError, Question, Scene, TaskName
from casu_dataset.script.schema import ScriptError, parse_script

DEFAULT_FAMILY_LIBRARY = FAMILY_LIBRARY_DIR
DEFAULT_WINDOW_S = 4.0
SHAPES = ("slot", "crossed")
_ID = re.compile(r"^[a-z0-9_]+$")


class FamilyError(LibraryError):
    """A family that breaks the format or an invariant; the message names file, family, field.
    Bad input (exit code 2: fix the family file), where a BuildError is a valid family one of
    whose variants failed while it was built (exit code 1)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fill(_Strict):
    type: str
    description: str
    keywords: list[str] = Field(min_length=1)


class FamilyQuestion(_Strict):
    task: TaskName
    q: str
    options: dict[str, str]
    why: dict[str, str]
    layers: list[Literal[LAYER_NAMES]] = Field(min_length=1)  # type: ignore[valid-type]

    @field_validator("q")
    @classmethod
    def _q(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("empty question")
        return v.strip()


class Family(_Strict):
    id: str
    shape: Literal[SHAPES]  # type: ignore[valid-type]
    slot: str
    versions: list[str] | None = None
    script: dict
    types: dict[str, str] = Field(default_factory=dict)
    fills: dict[str, Fill]
    variants: dict[str, str]
    questions: list[FamilyQuestion] = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not _ID.match(v):
            raise ValueError(f"{v!r}: use lower-case letters, digits and _")
        return v


@dataclass
class FamilyScene(Scene):
    """A variant scene: a Scene plus where it sits in its family."""

    family_id: str = ""
    variant: str = ""
    shape: str = ""
    slot_kind: str = ""  # "event" | "background"
    slot: str = ""  # the slot event id, or "background"
    speech_version: str = ""  # crossed families: the version name; slot families: ""
    fill: str = ""
    rng_key: str = ""  # shared random stream: same voices, timing and levels in all variants
    speech_group: str = ""  # variants with byte-identical speech share this
    fill_group: str = ""  # variants with byte-identical non-speech layers share this


@dataclass
class FamilyQ(Question):
    family_id: str = ""
    variant: str = ""


def variant_keys(fam: Family) -> list[str]:
    fills = list(fam.fills)
    if fam.shape == "slot":
        return fills
    return [f"{v}.{f}" for v in (fam.versions or []) for f in fills]


def option_order(family_id: str, task: str, keys: list[str]) -> list[str]:
    """One fixed order of a question's options (by variant key), drawn from a hash so authoring
    order never predicts the letter."""
    return sorted(keys, key=lambda k: hashlib.sha256(f"{family_id}/{task}/{k}".encode()).hexdigest())


def normalize_words(s: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", s.lower()))


def naming_violations(question: str, fills: dict[str, Fill]) -> list[str]:
    """Words of the fills (keywords, type name parts) that the question contains as whole words."""
    q = f" {normalize_words(question)} "
    found = []
    for name, f in fills.items():
        words = {normalize_words(k) for k in f.keywords} | {p for p in f.type.split("_") if len(p) >= 4}
        for w in sorted(words):
            if w and f" {w} " in q:
                found.append(f"{name}: {w!r}")
    return found


def _load_file(path: Path) -> list[tuple[int, dict]]:
    try:
        data = strict_yaml.load_library_text(strict_yaml.read_library_file(path), path)
    except UnicodeDecodeError:
        raise FamilyError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as err:
        raise FamilyError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, list):
        raise FamilyError(f"{path}: a family file is a YAML list of families")
    return list(enumerate(data))


def parse_family(item, where: str) -> Family:
    fid = item.get("id", "?") if isinstance(item, dict) else "?"
    try:
        return Family.model_validate(item)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise FamilyError(f"{where}: family {fid}: {loc}: {first['msg']}") from None


def compile_family(fam: Family, source: str = "<family>") -> list[FamilyScene]:
    """The four variant scenes of one family, or FamilyError naming the field."""
    w = f"{source}: family {fam.id}"
    s = fam.script
    if "id" in s:
        raise FamilyError(f"{w}: script.id: leave it out (variant ids are FAMILY.VARIANT)")
    events = s.get("events") or []
    ev_ids = [e.get("id") for e in events if isinstance(e, dict)]
    slot_kind = "background" if fam.slot == "background" else "event"
    if slot_kind == "event" and fam.slot not in ev_ids:
        raise FamilyError(
            f"{w}: slot: {fam.slot!r} is neither 'background' nor an event id of script.events {ev_ids}"
        )
    if slot_kind == "background" and "background" in s:
        raise FamilyError(
            f"{w}: script.background: the background is the slot; its sound comes from the fills"
        )
    if slot_kind == "event":
        slot_ev = events[ev_ids.index(fam.slot)]
        for k in ("description", "keywords"):
            if k in slot_ev:
                raise FamilyError(f"{w}: script.events.{fam.slot}.{k}: the slot's sound comes from the fills")
    # Non-slot layers need their intended bank type; the slot's comes from each fill.
    want = ({"background"} if slot_kind == "event" else set()) | {e for e in ev_ids if e != fam.slot}
    if set(fam.types) != want:
        # key=str: an event without an id (None) is named in the message, not a TypeError
        raise FamilyError(
            f"{w}: types: keys {sorted(fam.types)} must be the non-slot layers {sorted(want, key=str)}"
        )
    n_fills = 4 if fam.shape == "slot" else 2
    if len(fam.fills) != n_fills:
        raise FamilyError(
            f"{w}: fills: a {fam.shape} family has exactly {n_fills} fills, got {len(fam.fills)}"
        )
    for name in fam.fills:
        if not _ID.match(name):
            raise FamilyError(f"{w}: fills.{name}: use lower-case letters, digits and _")
    types = [f.type for f in fam.fills.values()]
    if len(set(types)) != len(types):
        raise FamilyError(
            f"{w}: fills: two fills share a bank type ({types}); fills must be different sounds"
        )
    versions = _versions(fam, w)
    keys = variant_keys(fam)
    if set(fam.variants) != set(keys):
        raise FamilyError(f"{w}: variants: keys {sorted(fam.variants)} must be exactly {sorted(keys)}")
    for k, d in fam.variants.items():
        if not str(d).strip():
            raise FamilyError(f"{w}: variants.{k}: empty reference description")
    tasks = [q.task for q in fam.questions]
    if len(set(tasks)) != len(tasks):
        raise FamilyError(f"{w}: questions: more than one question for one task ({tasks})")
    for q in fam.questions:
        wq = f"{w}: questions.{q.task}"
        if set(q.options) != set(keys):
            raise FamilyError(
                f"{wq}.options: keys {sorted(q.options)} must be exactly the variants {sorted(keys)}"
            )
        if set(q.why) != set(keys):
            raise FamilyError(f"{wq}.why: keys {sorted(q.why)} must be exactly the variants {sorted(keys)}")
        texts = [normalize_words(t) for t in q.options.values()]
        if any(not t for t in texts) or len(set(texts)) != 4:
            raise FamilyError(f"{wq}.options: the four options must be non-empty and distinct")
        nq = f" {normalize_words(q.q)} "
        for k, t in q.options.items():
            if f" {normalize_words(t)} " in nq:
                raise FamilyError(f"{wq}.options.{k}: the option text appears in the question")
        named = naming_violations(q.q, fam.fills)
        if named:
            raise FamilyError(f"{wq}.q: the question names a fill ({', '.join(named)})")
    # One script per speech version, validated once; variants differ only in the slot.
    out: list[FamilyScene] = []
    for key in keys:
        version, _, fill_name = key.rpartition(".") if fam.shape == "crossed" else ("", "", key)
        fill = fam.fills[fill_name]
        raw = {**s, "turns": versions[version], "id": f"{fam.id}.{key}"}
        if slot_kind == "background":
            raw["background"] = {"description": fill.description, "keywords": list(fill.keywords)}
        else:
            raw["events"] = [
                dict(
                    e,
                    description=fill.description,
                    keywords=list(fill.keywords),
                    window=e.get("window", DEFAULT_WINDOW_S),
                )
                if e.get("id") == fam.slot
                else e
                for e in events
            ]
        try:
            script = parse_script(raw, f"{w}: variant {key}")
        except ScriptError as err:
            raise FamilyError(str(err)) from None
        vtypes = dict(fam.types, **{fam.slot: fill.type})
        out.append(
            FamilyScene(
                script=script,
                description=" ".join(str(fam.variants[key]).split()),
                types=vtypes,
                questions=[],
                variant_of=None,
                source=source,
                family_id=fam.id,
                variant=key,
                shape=fam.shape,
                slot_kind=slot_kind,
                slot=fam.slot,
                speech_version=version,
                fill=fill_name,
                rng_key=fam.id,
                speech_group=f"{fam.id}/{version or 'speech'}",
                fill_group=f"{fam.id}/{fill_name}",
            )
        )
    for q in fam.questions:
        order = option_order(fam.id, q.task, keys)
        opts = [" ".join(q.options[k].split()) for k in order]
        for sc in out:
            letter = LETTERS[order.index(sc.variant)]
            sc.questions.append(
                FamilyQ(
                    id=f"{sc.script.id}/{q.task}",
                    scene_id=sc.script.id,
                    task=q.task,
                    question=q.q,
                    options=list(opts),
                    answer=letter,
                    rationale=" ".join(q.why[sc.variant].split()),
                    layers=list(q.layers),
                    minimal_pair_id=None,
                    family_id=fam.id,
                    variant=sc.variant,
                )
            )
    return out


def _versions(fam: Family, w: str) -> dict[str, list[dict]]:
    """version name -> the list of turns ({speaker, text}) of that version ('' for slot families)."""
    turns = fam.script.get("turns")
    if not isinstance(turns, list) or not turns:
        raise FamilyError(f"{w}: script.turns: a non-empty list of turns is required")
    if fam.shape == "slot":
        if fam.versions:
            raise FamilyError(f"{w}: versions: only crossed families have speech versions")
        for i, t in enumerate(turns):
            if not isinstance(t, dict) or not isinstance(t.get("text"), str):
                raise FamilyError(f"{w}: script.turns[{i}].text: a slot family's turn text is one string")
        return {"": turns}
    vs = fam.versions or []
    if len(vs) != 2 or len(set(vs)) != 2 or not all(_ID.match(v) for v in vs):
        raise FamilyError(
            f"{w}: versions: a crossed family names exactly two distinct versions ([a-z0-9_]), got {vs}"
        )
    out: dict[str, list[dict]] = {v: [] for v in vs}
    differs = False
    for i, t in enumerate(turns):
        text = t.get("text") if isinstance(t, dict) else None
        if isinstance(text, dict):
            if set(text) != set(vs):
                raise FamilyError(
                    f"{w}: script.turns[{i}].text: keys {sorted(text)} must be the versions {vs}"
                )
            differs |= normalize_words(str(text[vs[0]])) != normalize_words(str(text[vs[1]]))
            for v in vs:
                out[v].append({**t, "text": text[v]})
        elif isinstance(text, str):
            for v in vs:
                out[v].append(dict(t))
        else:
            raise FamilyError(f"{w}: script.turns[{i}].text: a string or a mapping {{VERSION: text}}")
    if not differs:
        raise FamilyError(f"{w}: script.turns: the two versions are identical; at least one turn must differ")
    return out


def compile_families(
    folder: str | Path = DEFAULT_FAMILY_LIBRARY, skipped: list[dict] | None = None
) -> list[FamilyScene]:
    """Every variant scene of every family in `folder` (or one file). With `skipped`, a family
    that fails is recorded there as {scene_id: FAMILY, reason} and the rest compile."""
    folder = Path(folder)
    files = strict_yaml.yaml_files(folder) if folder.is_dir() else [folder]
    if not files:
        raise FamilyError(f"{folder}: no family files (*.yaml, *.yml)")
    seen: dict[str, Path] = {}
    out: list[FamilyScene] = []
    for f in files:
        for i, item in _load_file(f):
            try:
                fam = parse_family(item, str(f))
                if fam.id in seen:
                    raise FamilyError(f"{f}: family {fam.id}: id also used in {seen[fam.id]}")
                seen[fam.id] = f
                out.extend(compile_family(fam, str(f)))
            except FamilyError as err:
                if skipped is None:
                    raise
                fid = item.get("id", f"#{i}") if isinstance(item, dict) else f"#{i}"
                skipped.append({"scene_id": str(fid), "reason": str(err)})
    return out


def is_family_library(folder: str | Path) -> bool:
    """True when the files hold families (a `shape` field), not v1 scenarios."""
    folder = Path(folder)
    files = strict_yaml.yaml_files(folder) if folder.is_dir() else [folder]
    for f in files:
        try:
            data = strict_yaml.load_library_text(f.read_text(encoding="utf-8"), f)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(data, list) and data and isinstance(data[0], dict):
            return "shape" in data[0]
    return False


def families_of(scenes: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in scenes:
        if isinstance(s, FamilyScene) and s.family_id:
            out.setdefault(s.family_id, []).append(s)
    return out
