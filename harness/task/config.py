"""A task is a YAML file in tasks/ parsed into a typed, validated `TaskConfig` (as lm-eval does).

Validation happens before any model is loaded; errors name the file and the field."""

from __future__ import annotations

import string
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from casu_dataset import contract
from casu_dataset.core import strict_yaml
from casu_dataset.core.errors import CasuError
from harness.scoring.metrics import listable
from harness.task.lmeval_yaml import LmEvalYamlError, is_group, is_lmeval_task, to_task_config

TEMPLATE_FIELDS = {"question", "options", "hint", "letters"}
KIND = {"multiple_choice": "multiple_choice", "generate_until": "open"}  # output_type -> contract kind


class TaskConfigError(CasuError, ValueError):
    pass


def builtin_tasks_dir() -> Path:
    """The built-in task YAMLs. Installed from a wheel they are the package data `harness/tasks/`
    (setup.py maps the repository's tasks/ there); in a checkout (an editable install, or the
    source on PYTHONPATH) harness/ has no tasks folder and they are the checkout's top-level tasks/."""
    installed = resources.files("harness") / "tasks"
    if installed.is_dir():
        return Path(str(installed))
    checkout = Path(__file__).resolve().parents[2] / "tasks"
    if not checkout.is_dir():
        raise TaskConfigError(
            f"no built-in tasks: neither {installed} (an installed wheel) nor {checkout} "
            "(a checkout) is a folder; reinstall casu"
        )
    return checkout


class Generation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: int = Field(64, ge=1, le=4096)
    do_sample: bool = False
    temperature: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    # lm-eval's `until`: stop strings; the answer is cut at the first one, as lm-eval cuts it
    until: list[str] | None = None
    # nucleus and top-k sampling (with do_sample); only adapters that pass them on take them
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=1)

    @field_validator("until")
    @classmethod
    def _stops(cls, v):
        if v is not None and any(not s for s in v):
            raise ValueError("an empty stop string would cut every answer to nothing")
        return v or None

    @model_validator(mode="after")
    def _sampling(self):
        # The same rule as GenerationSettings.check(), which would otherwise stop the run later.
        if self.do_sample and self.temperature <= 0:
            raise ValueError("do_sample: true needs temperature > 0 (set generation.temperature, e.g. 0.7)")
        if not self.do_sample and self.temperature > 0:
            raise ValueError(
                f"temperature {self.temperature} has no effect without do_sample: true "
                "(decoding is greedy); set do_sample: true or drop temperature"
            )
        for name in ("top_p", "top_k"):
            if not self.do_sample and getattr(self, name) is not None:
                raise ValueError(
                    f"{name} has no effect without do_sample: true (decoding is greedy); set "
                    f"do_sample: true (and a temperature) or drop {name}"
                )
        return self


class TaskConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: int = Field(ge=0)
    description: str = ""
    tags: list[str] = []
    # One folder name inside the dataset: no leading dot, so `..` (or `.`) cannot reach outside it.
    dataset_config: str = Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
    split: str = Field("test", pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")
    output_type: Literal["multiple_choice", "generate_until"]
    prompt_template: str
    answer_format: Literal["letter", "free_text"]
    metrics: list[str]
    generation: Generation = Generation()
    breakdowns: list[Literal["speech_type", "place", "layers"]] = []
    # A task written the lm-eval way (task/lmeval_yaml.py): Jinja templates over the row's columns
    # instead of prompt_template; None for CASU's own schema.
    doc_to_text: str | None = None
    doc_to_choice: str | list[str] | None = None
    doc_to_target: str | int | None = None
    lmeval_source: dict | None = None  # lm-eval keys recorded but not read (dataset_path, ...)

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v):
        known = listable()
        unknown = sorted(set(v) - set(known))
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {sorted(known)}")
        if not v:
            raise ValueError("at least one metric")
        return v

    @field_validator("prompt_template")
    @classmethod
    def _template_fields(cls, v):
        if v == "":  # an lm-eval-style task: doc_to_text (checked in _consistent)
            return v
        names = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
        unknown = sorted(names - TEMPLATE_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown placeholder(s) {unknown}; allowed: {sorted(TEMPLATE_FIELDS)} "
                "(write a literal brace as {{ or }})"
            )
        from harness.task.prompts import build_prompt

        try:  # render it as the run will, so format specs, conversions and stray braces fail here
            build_prompt(v, "Q?", ["a", "b"], "kitchen")
        except (ValueError, KeyError, IndexError, AttributeError) as err:
            raise ValueError(f"does not render ({type(err).__name__}: {err})") from None
        return v

    @model_validator(mode="after")
    def _consistent(self):
        mcq = self.answer_format == "letter"
        if mcq != (self.output_type == "multiple_choice"):
            raise ValueError(
                "answer_format 'letter' goes with output_type 'multiple_choice', "
                "'free_text' with 'generate_until'"
            )
        wrong = sorted(set(self.metrics) - set(listable(self.output_type)))
        if wrong:
            raise ValueError(f"metric(s) {wrong} do not apply to {self.output_type} tasks")
        if (self.doc_to_text is None) == (self.prompt_template == ""):
            raise ValueError("give prompt_template (CASU's schema) or doc_to_text (lm-eval's), one of them")
        if mcq and self.doc_to_text is None and "{options}" not in self.prompt_template:
            raise ValueError("a multiple-choice prompt_template must contain {options}")
        if mcq and self.doc_to_text is not None and self.doc_to_choice is None:
            raise ValueError("doc_to_choice: required with doc_to_text for a multiple-choice task")
        # The contract's registry: a registered task's YAML must agree with it, and CASU's own
        # configs hold one kind of row (questions with options, or descriptions with references).
        if self.dataset_config == contract.SCENES_CONFIG:
            raise ValueError("dataset_config 'scenes' holds scenes and stems, not questions")
        holder = contract.task_of_config(self.dataset_config)
        if holder is not None and mcq and not holder.is_mcq:
            raise ValueError(
                f"dataset_config {self.dataset_config!r} has no options: use output_type generate_until"
            )
        if holder is not None and not mcq and holder.is_mcq:
            raise ValueError(
                f"dataset_config {self.dataset_config!r} holds multiple-choice questions without "
                "references: use output_type multiple_choice"
            )
        spec = contract.registered_task(self.task)
        if spec is not None:
            if spec.kind != KIND[self.output_type]:
                raise ValueError(
                    f"task {self.task!r} is registered as {spec.kind} (casu_dataset.contract): "
                    f"output_type {self.output_type!r} does not match"
                )
            if spec.dataset_config != self.dataset_config:
                raise ValueError(
                    f"task {self.task!r} is registered with dataset_config {spec.dataset_config!r} "
                    f"(casu_dataset.contract), not {self.dataset_config!r}"
                )
        return self

    @property
    def label(self) -> str:
        """The short column label of tables (the registry's, else the task name)."""
        spec = contract.registered_task(self.task)
        return spec.short if spec else self.task

    @property
    def is_lmeval_style(self) -> bool:
        return self.doc_to_text is not None

    def resolved(self) -> dict:
        """The full config as used (defaults filled in), recorded with the results as lm-eval does
        (the lm-eval-style fields only when the task has them)."""
        return self.model_dump(mode="json", exclude_none=True)


def load_task(path: str | Path) -> TaskConfig:
    path = Path(path)
    try:
        data = strict_yaml.safe_load(path.read_text(), path)
    except OSError as err:
        raise TaskConfigError(f"{path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise TaskConfigError(
            f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as err:
        raise TaskConfigError(f"{path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise TaskConfigError(f"{path}: expected a mapping at the top level")
    lmeval = is_lmeval_task(data)
    if lmeval:
        try:
            data = to_task_config(data, path)
        except LmEvalYamlError as err:
            raise TaskConfigError(f"{path}: {err}") from None
    try:
        cfg = TaskConfig.model_validate(data)
    except ValidationError as err:
        msgs = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors())
        raise TaskConfigError(f"{path}: {msgs}") from None
    if not lmeval and cfg.task != path.stem:  # lm-eval names a task in the file, not by its name
        raise TaskConfigError(f"{path}: task: {cfg.task!r} must match the file name {path.stem!r}")
    return cfg


def load_tasks(
    dirs: Sequence[str | Path] | None = None, skipped: list[TaskConfigError] | None = None
) -> dict[str, TaskConfig]:
    """Every *.yaml / *.yml under the given folders (default: the built-in tasks), keyed by task
    name; lm-eval group files (`group:` with a `task:` list) tag the tasks they list.

    With `skipped` (a list), a file that fails validation is left out and its error appended,
    so the other tasks still run (lm-eval's habit); without it the first error is raised."""
    out: dict[str, TaskConfig] = {}
    groups: list[tuple[Path, str, list]] = []
    for d in dirs or [builtin_tasks_dir()]:
        d = Path(d)
        if not d.is_dir():
            raise TaskConfigError(f"--include_path {d}: not a folder")
        for f in strict_yaml.yaml_files(d):
            try:
                group = _group_file(f)
                if group == TEMPLATE:
                    continue  # an lm-eval template: read only through another file's include:
                if group is not None:
                    groups.append((f, *group))
                    continue
                cfg = load_task(f)
                if cfg.task in out:
                    raise TaskConfigError(f"{f}: task {cfg.task!r} is defined twice")
            except TaskConfigError as err:
                if skipped is None:
                    raise
                skipped.append(err)
                continue
            out[cfg.task] = cfg
    for f, name, members in groups:
        for m in members:
            if m in out:
                out[m] = out[m].model_copy(update={"tags": [*out[m].tags, name]})
            else:
                missing = TaskConfigError(f"{f}: group {name!r} lists {m!r}, which is no task here")
                if skipped is None:
                    raise missing
                skipped.append(missing)
    return out


TEMPLATE: tuple[str, list] = ("", [])  # _group_file's answer for an lm-eval template (no task of its own)


def _group_file(path: Path) -> tuple[str, list] | None:
    """(group name, member task names) of an lm-eval group file, TEMPLATE for an lm-eval-style
    file without `task:` (a base other files include), else None (a task file)."""
    try:
        data = strict_yaml.safe_load(path.read_text(encoding="utf-8"), path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None  # load_task names the problem
    if isinstance(data, dict) and is_lmeval_task(data) and "task" not in data and "group" not in data:
        return TEMPLATE
    if not isinstance(data, dict) or not is_group(data):
        return None
    names = [t if isinstance(t, str) else (t or {}).get("task") for t in data["task"]]
    if not all(isinstance(n, str) for n in names) or not isinstance(data["group"], str):
        raise TaskConfigError(f"{path}: group: a name, and task: a list of task names")
    return data["group"], names


def with_builtins(include_path: list[str | Path] | None) -> list[Path]:
    """The built-in tasks folder, then each --include_path folder: extra folders add tasks, as
    lm-eval's --include_path does, and a name defined twice is an error naming the file."""
    dirs = [builtin_tasks_dir(), *(Path(d) for d in include_path or [])]
    seen: set[Path] = set()
    out: list[Path] = []
    for d in dirs:
        if d.resolve() not in seen:  # tasks/ given again: once
            seen.add(d.resolve())
            out.append(d)
    return out


def select_tasks(spec: str, tasks: dict[str, TaskConfig]) -> list[TaskConfig]:
    """`all`, a tag (e.g. `casu`), or a comma list of task names and tags."""
    chosen: dict[str, TaskConfig] = {}
    for name in (s.strip() for s in spec.split(",") if s.strip()):
        if name == "all":
            chosen.update(tasks)
        elif name in tasks:
            chosen[name] = tasks[name]
        else:
            tagged = {k: t for k, t in tasks.items() if name in t.tags}
            if not tagged:
                raise TaskConfigError(
                    f"--tasks {name!r}: no such task or tag; tasks: {', '.join(sorted(tasks))}"
                )
            chosen.update(tagged)
    if not chosen:
        raise TaskConfigError("--tasks: nothing selected")
    return list(chosen.values())


def apply_gen_kwargs(tasks: list, kw: dict) -> list:
    """Each task with `kw` merged over its YAML `generation` block, validated as the YAML is."""
    if not kw:
        return tasks
    out = []
    for t in tasks:
        try:
            gen = Generation.model_validate({**t.generation.model_dump(), **kw})
        except ValidationError as err:
            e = err.errors()[0]
            where = ".".join(str(x) for x in e["loc"]) or ", ".join(kw)
            raise ValueError(f"--gen_kwargs {where}: {e['msg']} (task {t.task})") from None
        out.append(t.model_copy(update={"generation": gen}))
    return out
