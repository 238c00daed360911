"""The contract between the dataset builder and the harness: the one place that defines what a
CASU dataset holds.

- the task registry (name, short label, kind, dataset config, the agents' guide); `tasks/*.yaml`
  are validated against it, and adding a task is one `register_task` entry plus one YAML;
- the dataset configs, the contrast-family columns, the layer and condition names, option letters;
- the scene annotation as a typed, version-checked reader with `active_spans()`;
- what the dataset card and the harness's results both name: the evaluation framework and the
  one leaderboard metric per task kind.

The shared infrastructure both sides use lives in `casu_dataset.core` (the seeded-RNG derivation
in `core.rng`, atomic writes, the Hub client), and the builder's models the harness scores with
(the sentence embedder, the Whisper checker and its transcript normaliser) in
`casu_dataset.builder_models`, each behind a function that imports it only when called: this
module imports nothing of the builder's stages, so every stage can import it.

Everything here is cheap to import (the standard library only). `harness/` and `model_adapters/`
import from `casu_dataset` only this module, `casu_dataset.formats.reader` (the one reader of a
built dataset), `casu_dataset.builder_models` and `casu_dataset.core` (the shared
infrastructure: errors, cache layout, content keys, seeded streams, atomic writes, audio I/O,
loudness, redaction, the Hub client, LLM backends); tests/test_contract.py holds them to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from casu_dataset.core.errors import InputError, LoadError

# ---------------------------------------------------------------- tasks

TaskKind = Literal["multiple_choice", "open"]


@dataclass(frozen=True)
class TaskSpec:
    """One task of the benchmark. `dataset_config`: the config (folder) of the dataset holding its
    rows; `guide`: what the question agent is told the task asks (multiple-choice tasks)."""

    name: str
    short: str
    kind: TaskKind
    dataset_config: str
    guide: str = ""

    @property
    def is_mcq(self) -> bool:
        return self.kind == "multiple_choice"


class UnknownTaskError(LoadError, KeyError):
    """A task name no registered task has (get_task, casu_dataset.load); the message lists the
    tasks. A LoadError (so a ValueError) for the loader's callers, a KeyError for a lookup by name."""

    def __str__(self):
        return str(self.args[0])


_TASKS: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec, replace: bool = False) -> TaskSpec:
    """Add a task (order of registration is the order of tables and configs)."""
    if spec.kind not in ("multiple_choice", "open"):
        raise ValueError(f"task {spec.name!r}: kind {spec.kind!r} must be multiple_choice or open")
    if spec.name in _TASKS and not replace and _TASKS[spec.name] != spec:
        raise ValueError(f"task {spec.name!r} is already registered")
    if spec.dataset_config == SCENES_CONFIG:
        raise ValueError(f"task {spec.name!r}: dataset_config {SCENES_CONFIG!r} holds scenes, not task rows")
    _TASKS[spec.name] = spec
    return spec


def unregister_task(name: str) -> None:
    _TASKS.pop(name, None)


def tasks(kind: TaskKind | None = None) -> tuple[TaskSpec, ...]:
    return tuple(t for t in _TASKS.values() if kind is None or t.kind == kind)


def task_names(kind: TaskKind | None = None) -> tuple[str, ...]:
    return tuple(t.name for t in tasks(kind))


def registered_task(name: str) -> TaskSpec | None:
    return _TASKS.get(name)


def get_task(name: str) -> TaskSpec:
    if name not in _TASKS:
        raise UnknownTaskError(f"unknown task {name!r} (tasks: {', '.join(_TASKS)})")
    return _TASKS[name]


def mcq_tasks() -> tuple[str, ...]:
    """The multiple-choice task names, in registry order (the builder's question configs)."""
    return task_names("multiple_choice")


def task_of_config(config: str) -> TaskSpec | None:
    return next((t for t in _TASKS.values() if t.dataset_config == config), None)


def mcq_configs() -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.dataset_config for t in tasks("multiple_choice")))


def open_configs() -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.dataset_config for t in tasks("open")))


SCENES_CONFIG = "scenes"


def dataset_configs() -> tuple[str, ...]:
    """Every config of a built dataset: the scenes (with stems), then the task configs."""
    return (SCENES_CONFIG, *mcq_configs(), *open_configs())


for _spec in (
    TaskSpec(
        "contextual_reasoning",
        "Contextual",
        "multiple_choice",
        "contextual_reasoning",
        "why something is said or done, answerable only by combining the speech with an event or the "
        "background",
    ),
    TaskSpec(
        "entity_extraction",
        "Entity",
        "multiple_choice",
        "entity_extraction",
        "which entity (animal, object, vehicle, person) in the scene explains an observation; the entity is "
        "heard, not named",
    ),
    TaskSpec(
        "role_inference",
        "Role",
        "multiple_choice",
        "role_inference",
        "the most plausible role of a speaker or the relationship between the two speakers",
    ),
    TaskSpec(
        "counterfactual_reasoning",
        "Counterfactual",
        "multiple_choice",
        "counterfactual_reasoning",
        "how an interpretation would change if one sound in the scene were different or absent",
    ),
    TaskSpec("scene_description", "Description", "open", "scene_description"),
):
    register_task(_spec)
DESCRIPTION_TASK = "scene_description"  # the open task the builder writes references for
AGENT_DEFAULT_TASKS = (
    "contextual_reasoning",
    "role_inference",
)  # `generate --families` asks these by default

# ---------------------------------------------------------------- the card and the results

# The dataset card's eval.yaml `evaluation_framework` and each .eval_results entry's (harness/output/hub.py):
# the Hub's docs ask for the same value.
EVAL_FRAMEWORK = "casu-harness"
# The one value per task a model repo reports (.eval_results, harness/output/hub.py), on one 0-100 scale:
# (the entry's metric name, how eval.yaml's description names it).
LEADERBOARD_METRIC = {
    "multiple_choice": ("accuracy", "accuracy x100"),
    "open": ("bertscore_f1", "BERTScore F1 x100"),
}

# ---------------------------------------------------------------- options, families, layers

LETTERS = "ABCDEFGHIJ"  # the harness accepts up to 10 options
NUM_OPTIONS = 4  # CASU questions have four
DATASET_LETTERS = LETTERS[:NUM_OPTIONS]

# Contrast-family columns of the v2 dataset (empty outside a family), see scenarios/FAMILIES.md.
FAMILY_FIELDS = (
    "family_id",
    "variant",
    "family_shape",
    "slot_kind",
    "speech_version",
    "fill",
    "speech_group",
    "fill_group",
)

LAYERS = ("speech", "events", "background")
LAYER_CODES = {"speech": "P", "events": "E", "background": "B"}
FULL_CONDITION = "".join(LAYER_CODES[layer] for layer in LAYERS)  # "PEB": every layer kept


def condition_name(keep) -> str:
    """'PEB' (all layers), 'P__' (speech only), '___' (all noise)."""
    return "".join(LAYER_CODES[layer] if layer in keep else "_" for layer in LAYERS)


# ---------------------------------------------------------------- scene annotation

ANNOTATION_FORMAT = "casu.scene-annotation"
ANNOTATION_VERSION = 1
SUPPORTED_ANNOTATION_VERSIONS = (1,)


class AnnotationError(InputError, ValueError):
    """A scene annotation this code cannot read (not CASU's, another version, a field missing)."""


@dataclass(frozen=True)
class SceneAnnotation:
    """The parts of a scene's annotation the harness reads; `raw` keeps the whole document."""

    scene_id: str
    sample_rate: int
    num_samples: int
    turns: tuple[tuple[float, float], ...]  # (onset, offset) s, as placed in the mix
    events: tuple[tuple[float, float], ...]
    event_windows: tuple[float | None, ...]  # each event's reserved slot length (contrast slots)
    turn_reserve: tuple[float, ...] | None
    rng_key: str | None
    raw: dict

    @classmethod
    def parse(cls, annotation: dict | str, where: str = "annotation") -> "SceneAnnotation":
        if isinstance(annotation, (str, bytes)):
            try:
                annotation = json.loads(annotation)
            except json.JSONDecodeError as err:
                raise AnnotationError(f"{where}: not JSON ({err})") from None
        if not isinstance(annotation, dict):
            raise AnnotationError(f"{where}: expected a JSON object")
        a = annotation
        if a.get("format") != ANNOTATION_FORMAT:
            raise AnnotationError(f"{where}: format {a.get('format')!r} is not {ANNOTATION_FORMAT!r}")
        if a.get("version") not in SUPPORTED_ANNOTATION_VERSIONS:
            raise AnnotationError(
                f"{where}: version {a.get('version')!r} is not supported "
                f"(this code reads {SUPPORTED_ANNOTATION_VERSIONS})"
            )
        try:
            plan = a["plan"]
            windows = tuple(e.get("window") for e in a["script"]["events"])
            reserve = plan.get("turn_reserve")
            return cls(
                scene_id=a["scene_id"],
                sample_rate=int(a["sample_rate"]),
                num_samples=int(a["num_samples"]),
                turns=tuple((float(t["onset"]), float(t["offset"])) for t in plan["turns"]),
                events=tuple((float(e["onset"]), float(e["offset"])) for e in plan["events"]),
                event_windows=windows,
                turn_reserve=tuple(reserve) if reserve else None,
                rng_key=plan.get("rng_key"),
                raw=a,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise AnnotationError(
                f"{where} ({a.get('scene_id', '?')}): missing or bad field {type(err).__name__}: {err}"
            ) from None

    @property
    def family_key(self) -> str | None:
        """The shared random-stream key of a contrast-family variant, None for a lone scene."""
        return self.rng_key if self.rng_key and self.rng_key != self.scene_id else None

    def expected_lufs(self, layer: str) -> float | None:
        return ((self.raw.get("loudness") or {}).get(layer) or {}).get("expected_lufs")

    def active_spans(self, layer: str, reserved: bool = False) -> list[tuple[int, int]]:
        """Sample intervals where the layer is active, merged where they overlap. `reserved`: use
        the slots the timeline reserved (event windows, turn reserves) instead of the clips' ends."""
        sr, n = self.sample_rate, self.num_samples
        if layer == "background":
            return [(0, n)] if n else []
        if layer not in LAYERS:
            raise ValueError(f"layer {layer!r}: one of {LAYERS}")
        items = self.turns if layer == "speech" else self.events
        ends = [off for _, off in items]
        if reserved and layer == "events":
            ends = [on + w if w else end for (on, _), w, end in zip(items, self.event_windows, ends)]
        if reserved and layer == "speech" and self.turn_reserve:
            ends = [max(end, on + r) for (on, _), r, end in zip(items, self.turn_reserve, ends)]
        spans = sorted(
            (max(0, int(round(on * sr))), min(n, int(round(end * sr)))) for (on, _), end in zip(items, ends)
        )
        merged: list[list[int]] = []
        for a, b in spans:
            if b <= a:
                continue
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return [(a, b) for a, b in merged]
