"""A task is a YAML file in tasks/ parsed into a typed, validated `TaskConfig` (as lm-eval does).

Validation happens before any model is loaded; errors name the file and the field."""

from __future__ import annotations

import string
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Literal

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
from casu_dataset.core.errors import InputError
from harness.scoring.metrics import listable
from harness.task.lmeval_yaml import (
    LmEvalYamlError,
    is_group,
    is_lmeval_task,
    read_yaml,
    to_task_config,
)

TEMPLATE_FIELDS = {"question", "options", "hint", "letters"}
KIND = {"multiple_choice": "multiple_choice", "generate_until": "open"}  # output_type -> contract kind


class TaskConfigError(InputError, ValueError):
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
    lmeval_source: dict | None = None  # lm-eval keys recorded but not read (fewshot_config, ...)
    alias: str | None = None  # lm-eval's task_alias: the name tables and lm-eval's results show
    # lm-eval's dataset_path: the dataset this task names (a built folder or a Hub repo id);
    # --dataset overrides it, and a run reads one dataset (api.resolve_dataset)
    dataset_path: str | None = None
    # Not part of the YAML: the file it came from (every error names it) and the lm-eval group
    # files that list it with an aggregate_metric_list (a group score over its member tasks).
    source_file: str | None = Field(None, exclude=True)
    lmeval_groups: list[dict] | None = Field(None, exclude=True)

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
        data = read_yaml(path)
    except LmEvalYamlError as err:  # a `!function` tag (a Python hook), bad YAML, a FIFO: one line
        raise TaskConfigError(f"{path}: {err}") from None
    except OSError as err:
        raise TaskConfigError(f"{path}: cannot read it ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise TaskConfigError(
            f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); save it as UTF-8"
        ) from None
    if not isinstance(data, dict):
        raise TaskConfigError(f"{path}: expected a mapping at the top level")
    inner = sorted({"source_file", "lmeval_groups"} & set(data))
    if inner:
        raise TaskConfigError(f"{path}: unknown key(s) {inner}")
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
    return cfg.model_copy(update={"source_file": str(path)})


def load_tasks(
    dirs: Sequence[str | Path] | None = None, skipped: list[TaskConfigError] | None = None
) -> dict[str, TaskConfig]:
    """Every *.yaml / *.yml under the given folders (default: the built-in tasks), keyed by task
    name; lm-eval group files (`group:` with a `task:` list) tag the tasks they list.

    With `skipped` (a list), a file that fails validation is left out and its error appended,
    so the other tasks still run (lm-eval's habit); without it the first error is raised."""
    out: dict[str, TaskConfig] = {}
    groups: list[dict] = []
    for d in dirs or [builtin_tasks_dir()]:
        d = Path(d)
        _include_dir(d)
        for f in _yaml_entries(d):
            try:
                _task_file(f)
                group = _group_file(f)
                if isinstance(group, _Template):
                    continue  # an lm-eval template: read only through another file's include:
                if group is not None:
                    groups.append(group)
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
    for g in groups:
        missing = [m for m in g["task"] if m not in out]
        for m in g["task"]:
            if m in out:  # a group with a task missing tags the others, and has no group score
                update: dict = {"tags": [*out[m].tags, g["group"]]}
                if not missing:
                    update["lmeval_groups"] = [*(out[m].lmeval_groups or []), g]
                if g["aliases"].get(m):
                    update["alias"] = g["aliases"][m]
                out[m] = out[m].model_copy(update=update)
        if missing:
            incomplete = TaskConfigError(
                f"{g['file']}: group {g['group']!r} lists {missing[0]!r}, which is no task here"
            )
            if skipped is None:
                raise incomplete
            skipped.append(incomplete)
    return out


class _Template:
    """_group_file's answer for an lm-eval template (no task of its own)."""


TEMPLATE = _Template()
GROUP_KEYS = {"group", "group_alias", "task", "aggregate_metric_list", "metadata"}
AGG_KEYS = {"metric", "aggregation", "weight_by_size", "filter_list"}


def _group_file(path: Path) -> dict | _Template | None:
    """An lm-eval group file's spec ({group, alias, task: member names, aliases, aggregate_metric_list,
    version, file}), TEMPLATE for an lm-eval-style file without `task:` (a base other files
    include), else None (a task file)."""
    try:
        data = read_yaml(path)
    except (OSError, UnicodeDecodeError, LmEvalYamlError):
        return None  # load_task names the problem
    if isinstance(data, dict) and is_lmeval_task(data) and "task" not in data and "group" not in data:
        return TEMPLATE
    if not isinstance(data, dict) or not is_group(data):
        return None
    try:
        return _group_spec(data, path)
    except LmEvalYamlError as err:
        raise TaskConfigError(f"{path}: {err}") from None


def _group_spec(data: dict, path: Path) -> dict:
    """lm-eval's GroupConfig, checked: `group`, `group_alias`, `task` (names, or {task, task_alias}),
    `aggregate_metric_list` ({metric, aggregation: mean, weight_by_size, filter_list}), `metadata`."""
    from harness.scoring.metrics import METRICS

    unknown = sorted(set(data) - GROUP_KEYS)
    if unknown:
        raise LmEvalYamlError(
            f"unknown key(s) {unknown} for a group file; keys: {', '.join(sorted(GROUP_KEYS))}"
        )
    if not isinstance(data["group"], str) or not data["group"].strip():
        raise LmEvalYamlError("group: a name, and task: a list of task names")
    names: list[str] = []
    aliases: dict[str, str] = {}
    for i, t in enumerate(data["task"]):
        if isinstance(t, dict):
            extra = sorted(set(t) - {"task", "task_alias"})
            if extra or not isinstance(t.get("task"), str):
                raise LmEvalYamlError(
                    f"task[{i}]: a task name or {{task: NAME, task_alias: SHOWN}}"
                    + (f" (CASU does not override {extra} in a group)" if extra else "")
                )
            if t.get("task_alias") is not None:
                aliases[t["task"]] = str(t["task_alias"])
            t = t["task"]
        if not isinstance(t, str):
            raise LmEvalYamlError(f"task[{i}]: a task name, got {t!r}")
        names.append(t)
    alias = data.get("group_alias")
    if alias is not None and not isinstance(alias, str):
        raise LmEvalYamlError(f"group_alias: a name, got {alias!r}")
    agg = data.get("aggregate_metric_list")
    if isinstance(agg, dict):
        agg = [agg]
    if agg is not None and not isinstance(agg, list):
        raise LmEvalYamlError(
            "aggregate_metric_list: a list of {metric: NAME, aggregation: mean, weight_by_size: true}"
        )
    lm_names = {m.lmeval: m.lmeval for m in METRICS.values() if m.lmeval}
    lm_names.update({m.name: m.lmeval for m in METRICS.values() if m.lmeval})
    entries = []
    for i, e in enumerate(agg or []):
        where = f"aggregate_metric_list[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("metric"), str):
            raise LmEvalYamlError(f"{where}: give `metric: NAME`")
        extra = sorted(set(e) - AGG_KEYS)
        if extra:
            raise LmEvalYamlError(
                f"{where} ({e['metric']}): unknown key(s) {extra}; keys: {', '.join(sorted(AGG_KEYS))}"
            )
        if e["metric"] not in lm_names:
            raise LmEvalYamlError(
                f"{where}: {e['metric']!r} is not a metric in lm-eval's results; known: "
                + ", ".join(sorted(set(lm_names.values())))
            )
        if e.get("aggregation", "mean") != "mean":
            raise LmEvalYamlError(
                f"{where} ({e['metric']}): aggregation {e['aggregation']!r}: lm-eval's only aggregation "
                "is mean"
            )
        weight = e.get("weight_by_size", True)
        if not isinstance(weight, bool):
            raise LmEvalYamlError(f"{where} ({e['metric']}): weight_by_size: true or false, got {weight!r}")
        filters = e.get("filter_list")
        if isinstance(filters, str):
            filters = [filters]
        if filters is not None and not (
            isinstance(filters, list) and all(isinstance(x, str) for x in filters)
        ):
            raise LmEvalYamlError(f"{where} ({e['metric']}): filter_list: a filter name or a list of them")
        entries.append(
            {
                "metric": lm_names[e["metric"]],
                "aggregation": "mean",
                "weight_by_size": weight,
                "filter_list": filters,
            }
        )
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise LmEvalYamlError("metadata: a mapping (e.g. `version: 1`)")
    return {
        "group": data["group"],
        "alias": alias,
        "task": names,
        "aliases": aliases,
        "aggregate_metric_list": entries,
        "version": metadata.get("version"),
        "file": str(path),
    }


def with_builtins(include_path: list[str | Path] | None) -> list[Path]:
    """The built-in tasks folder, then each --include_path folder: extra folders add tasks, as
    lm-eval's --include_path does, and a name defined twice is an error naming the file. Each folder
    is checked first (a symlink loop, a FIFO or a file in its place is named)."""
    dirs = [builtin_tasks_dir(), *(Path(d) for d in include_path or [])]
    seen: set[Path] = set()
    out: list[Path] = []
    for d in dirs:
        real = _include_dir(d)
        if real not in seen:  # tasks/ given again: once
            seen.add(real)
            out.append(d)
    return out


def _include_dir(d: Path) -> Path:
    """An --include_path folder, resolved; TaskConfigError names what it is instead."""
    from casu_dataset.core.paths import PathError, input_path

    try:
        return input_path(d, f"--include_path {d}", "folder")
    except PathError as err:
        raise TaskConfigError(str(err).replace("no such folder", "not a folder (no such folder)")) from None


def _yaml_entries(d: Path) -> list[Path]:
    """The YAML names of a folder (`.yaml`, `.yml`), sorted: regular files and anything else under
    such a name (a FIFO, a dangling link, a link loop), which _task_file names instead of skipping
    it silently or blocking on it. Sub-folders are not read."""
    try:
        entries = sorted(p for p in d.iterdir() if p.suffix in strict_yaml.SUFFIXES)
    except OSError as err:
        raise TaskConfigError(f"--include_path {d}: cannot list it ({err.strerror})") from None
    return [p for p in entries if p.is_symlink() or not p.is_dir()]


def _task_file(f: Path) -> None:
    """TaskConfigError unless `f` (a YAML name in a tasks folder) is a readable regular file."""
    from casu_dataset.core.paths import PathError, input_path

    try:
        input_path(f, str(f), "file")
    except PathError as err:
        raise TaskConfigError(f"{err}; a task file must be a regular YAML file") from None


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


DEFAULT_DATASET = "casu_mini"


def dataset_of(tasks: list[TaskConfig], given: str | None) -> tuple[str, str]:
    """(the dataset a run reads, what named it) for `tasks`: `--dataset` when given (it overrides
    every task's dataset_path), else the one dataset_path the tasks name (a built folder, relative
    to the current folder as lm-eval's load_dataset reads it, or a Hub repo id; tasks without one
    read it too), else casu_mini. A run reads one dataset: tasks naming different ones are an error
    naming both files."""
    if given is not None:
        return given, "--dataset"
    import os

    named: dict[str, TaskConfig] = {}
    for t in tasks:
        if t.dataset_path is None:
            continue
        p = os.path.expanduser(t.dataset_path)
        key = os.path.realpath(p) if os.path.exists(p) else t.dataset_path
        named.setdefault(key, t)
    if len(named) > 1:
        (a, b) = list(named.values())[:2]
        raise TaskConfigError(
            f"{a.source_file}: dataset_path {a.dataset_path!r} and {b.source_file}: dataset_path "
            f"{b.dataset_path!r}: a run reads one dataset; give --dataset (it overrides dataset_path) or "
            "run these tasks apart"
        )
    if named:
        t = next(iter(named.values()))
        return str(t.dataset_path), f"dataset_path ({t.source_file})"
    return DEFAULT_DATASET, "--dataset"
