"""Task YAML written the lm-eval way, read into CASU's `TaskConfig`: `include:` inheritance,
Jinja `doc_to_text` / `doc_to_choice` / `doc_to_target` over a row's columns, `metric_list` with
CASU's registered metrics, `generation_kwargs`, `group` / `tag`, `dataset_name` / `test_split`.

`dataset_path` names the dataset (a built CASU folder or a Hub repo); `--dataset` overrides it,
and a run reads one dataset (harness/api.py). The templates see the row as stored, plus `hint`
(and `choices`, the row's `options` under mmlu's column name, when the row has no `choices`):
`doc_to_choice` never replaces a column. The Jinja templates run in a sandbox with undefined
names as errors, so a column the dataset lacks is named before any model loads. `!function`
(a Python hook) is refused in one line naming the file: CASU runs no Python from task YAML."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from casu_dataset.contract import LETTERS
from casu_dataset.core.errors import InputError

# Keys only lm-eval's schema has: a YAML with any of them is read as lm-eval's.
LMEVAL_KEYS = frozenset(
    {
        "include",
        "doc_to_text",
        "doc_to_choice",
        "doc_to_target",
        "metric_list",
        "dataset_path",
        "dataset_name",
        "test_split",
        "generation_kwargs",
        "group",
        "tag",
        "metadata",
        "description",
        "target_delimiter",
        "fewshot_delimiter",
        "num_fewshot",
        "should_decontaminate",
        "dataset_kwargs",
        "process_docs",
        "filter_list",
        "repeats",
        "task_alias",
        "fewshot_config",
    }
)
# lm-eval keys CASU cannot honour, with the reason (a file using them fails with it).
REFUSED = {
    "process_docs": "a Python hook (!function); CASU reads rows as the dataset has them",
    "filter_list": "CASU's answer parser is the one filter (an unparsed answer is counted as such)",
    "dataset_kwargs": "rows come from --dataset, a built CASU dataset",
    "repeats": "one answer per request (use --circular for rotated options)",
    "validation_split": "CASU tasks read one split (test_split)",
    "fewshot_split": "CASU tasks are zero-shot",
    "training_split": "CASU tasks are zero-shot",
}
# Accepted and recorded (lmeval_source), changing nothing: fewshot_config only with zero shots.
IGNORED = {"should_decontaminate", "target_delimiter", "fewshot_delimiter", "fewshot_config"}
OUTPUT_TYPES = ("multiple_choice", "generate_until")


class LmEvalYamlError(InputError, ValueError):
    """A problem with an lm-eval-style task file or a row it renders; the caller adds the file
    name (TaskConfigError) or the dataset and row (LoadError)."""


def is_lmeval_task(data: dict) -> bool:
    """Whether a task YAML's mapping is lm-eval's schema rather than CASU's (`description` and
    `task` are in both)."""
    return bool((LMEVAL_KEYS - {"description"}) & set(data)) and "prompt_template" not in data


def is_group(data: dict) -> bool:
    """An lm-eval group file: `group: NAME` and `task: [names]` (no task of its own)."""
    return "group" in data and isinstance(data.get("task"), list)


FUNCTION_WHY = (
    "`!function` names a Python hook; CASU does not run Python code from task YAML: write it as a "
    "Jinja template over the row's columns (doc_to_text, doc_to_choice, doc_to_target) or drop the key"
)


def python_hook(err: Exception, text: str) -> str | None:
    """The one-line reason for a YAML error raised by a `!function` tag (None for other errors):
    the line and what it says, and why CASU refuses it."""
    import yaml

    problem = getattr(err, "problem", "") or ""
    if not isinstance(err, yaml.constructor.ConstructorError) or "!function" not in problem:
        return None
    mark = getattr(err, "problem_mark", None)
    if mark is None:
        return FUNCTION_WHY
    lines = text.splitlines()
    shown = lines[mark.line].strip() if mark.line < len(lines) else ""
    return f"line {mark.line + 1} ({shown!r}): {FUNCTION_WHY}"


def read_yaml(path: Path):
    """A task file's YAML (strict keys); a `!function` tag or bad YAML is one LmEvalYamlError line
    (the caller adds the file name), and so is a path that is not a regular file (a FIFO, a device,
    a symlink loop), a file over 1 MiB or an alias bomb. FileNotFoundError (a path that is not
    there) and UnicodeDecodeError pass through."""
    import os

    import yaml

    from casu_dataset.core import strict_yaml
    from casu_dataset.core.paths import PathError, read_text

    if not os.path.lexists(path):
        raise FileNotFoundError(2, "No such file or directory", str(path))
    try:
        text = read_text(path, "the file")
    except PathError as err:
        raise LmEvalYamlError(str(err).removeprefix("the file: ")) from None
    try:
        return strict_yaml.safe_load(text, path, max_nodes=YAML_NODES)
    except yaml.YAMLError as err:
        why = python_hook(err, text)
        raise LmEvalYamlError(why or f"not valid YAML ({' '.join(str(err).split())})") from None
    except RecursionError:
        raise LmEvalYamlError("not valid YAML (nested too deeply)") from None


#: The most values a task or config YAML may expand to (aliases included): a billion-laughs file
#: is refused before it is built.
YAML_NODES = 100_000
#: How many files an include chain may pass through.
INCLUDE_DEPTH = 32


def with_includes(data: dict, path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """`include: other.yaml` (relative to this file) resolved: the included mapping, then this
    file's keys over it, recursively; a cycle, a missing file or a chain deeper than INCLUDE_DEPTH
    files is an error."""
    from casu_dataset.core.paths import PathError, real_path

    inc = data.get("include")
    if inc is None:
        return dict(data)
    if not isinstance(inc, str) or not inc.strip():
        raise LmEvalYamlError(f"include: a file name, got {inc!r:.60}")
    if len(seen) >= INCLUDE_DEPTH:
        chain = " -> ".join(p.name for p in seen[:3])
        raise LmEvalYamlError(
            f"include: {inc}: the include chain is deeper than {INCLUDE_DEPTH} files ({chain} -> ...); "
            "flatten it"
        )
    try:
        here = real_path(path, "this file")
        target = real_path(path.parent / inc, f"include: {inc}")
    except PathError as err:
        raise LmEvalYamlError(str(err)) from None
    if target in seen or target == here:
        raise LmEvalYamlError(f"include: {inc} includes itself (through {', '.join(p.name for p in seen)})")
    try:
        parent = read_yaml(target)
    except FileNotFoundError:
        raise LmEvalYamlError(f"include: {inc}: no such file beside {path.name}") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise LmEvalYamlError(f"include: {inc} ({target}): {err}") from None
    if not isinstance(parent, dict):
        raise LmEvalYamlError(f"include: {inc}: not a mapping")
    merged = with_includes(parent, target, (*seen, here))
    merged.update({k: v for k, v in data.items() if k != "include"})
    merged.pop("include", None)
    return merged


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


def _metrics(metric_list, output_type: str) -> list[str]:
    """lm-eval's metric_list -> CASU's registered metric names (by name or by lm-eval name)."""
    from harness.scoring.metrics import METRICS

    kind = output_type
    by_name = {m.name: m for m in METRICS.values() if kind in m.kinds}
    by_lmeval = {m.lmeval: m for m in by_name.values() if m.lmeval}
    out = []
    for i, entry in enumerate(metric_list or []):
        name = entry.get("metric") if isinstance(entry, dict) else entry
        if not isinstance(name, str):
            raise LmEvalYamlError(f"metric_list[{i}]: give `metric: NAME`")
        m = by_name.get(name) or by_lmeval.get(name)
        if m is None:
            known = sorted({*by_name, *by_lmeval})
            raise LmEvalYamlError(
                f"metric_list[{i}]: {name!r} is not a registered metric for {output_type} tasks; "
                f"known: {', '.join(known)}"
            )
        if isinstance(entry, dict):
            extra = sorted(set(entry) - {"metric", "aggregation", "higher_is_better"})
            if extra:
                raise LmEvalYamlError(
                    f"metric_list[{i}] ({name}): unknown key(s) {extra}"
                    + (
                        "; CASU's exact_match is lm-eval's with its default options"
                        if m.name == "exact_match"
                        else ""
                    )
                )
            if entry.get("higher_is_better") is False:
                raise LmEvalYamlError(f"metric_list[{i}] ({name}): CASU's {m.name} is higher-is-better")
        if m.name not in out:
            out.append(m.name)
    if not out:  # lm-eval's default for the kind
        out = ["accuracy"] if output_type == "multiple_choice" else ["bleu4"]
    return out


def _generation(gen: dict | None) -> dict:
    """lm-eval's generation_kwargs -> CASU's `generation` block."""
    if gen is None:
        return {}
    if not isinstance(gen, dict):
        raise LmEvalYamlError("generation_kwargs: a mapping")
    out: dict[str, Any] = {}
    for k, v in gen.items():
        if k in ("max_gen_toks", "max_new_tokens"):
            out["max_new_tokens"] = v
        elif k in ("do_sample", "temperature"):
            out[k] = v
        elif k == "until":
            out["until"] = _as_list(v)
        else:
            raise LmEvalYamlError(
                f"generation_kwargs.{k}: not honoured by CASU's adapters; use until, max_gen_toks, "
                "do_sample, temperature"
            )
    return out


def to_task_config(data: dict, path: Path) -> dict:
    """The TaskConfig fields of an lm-eval-style task file (its includes resolved)."""
    d = with_includes(data, path)
    for key, why in REFUSED.items():
        if key in d:
            raise LmEvalYamlError(f"{key}: not supported ({why})")
    if d.get("num_fewshot") not in (None, 0):
        raise LmEvalYamlError("num_fewshot: CASU tasks are zero-shot; use 0 or leave it out")
    output_type = d.get("output_type", "generate_until")
    if output_type not in OUTPUT_TYPES:
        raise LmEvalYamlError(f"output_type {output_type!r}: CASU runs {' or '.join(OUTPUT_TYPES)}")
    if "doc_to_text" not in d:
        raise LmEvalYamlError("doc_to_text: required (the prompt, a Jinja template over the row's columns)")
    mcq = output_type == "multiple_choice"
    if mcq and "doc_to_choice" not in d:
        raise LmEvalYamlError("doc_to_choice: required for multiple_choice (e.g. `{{options}}`)")
    known = set(LMEVAL_KEYS) | {"task", "output_type", "version"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise LmEvalYamlError(f"unknown key(s) {unknown} for an lm-eval-style task")
    metadata = d.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise LmEvalYamlError("metadata: a mapping (e.g. `version: 1`)")
    version = d.get("version", metadata.get("version", 0))
    try:
        version = int(float(str(version)))
    except (TypeError, ValueError):
        raise LmEvalYamlError(f"metadata.version {version!r}: a number") from None
    for key in ("doc_to_text", "doc_to_choice", "doc_to_target"):
        if isinstance(d.get(key), str):
            check_template(d[key], key)
    # lm-eval's `description` is text put before every prompt
    prefix = str(d.get("description") or "")
    alias = d.get("task_alias")
    if alias is not None and (not isinstance(alias, str) or not alias.strip()):
        raise LmEvalYamlError(f"task_alias: a name to show for the task, got {alias!r}")
    dataset_path = d.get("dataset_path")
    if dataset_path is not None and (not isinstance(dataset_path, str) or not dataset_path.strip()):
        raise LmEvalYamlError(
            f"dataset_path: a built CASU dataset folder or a Hub repo id, got {dataset_path!r}"
        )
    if d.get("fewshot_config") is not None and not isinstance(d["fewshot_config"], dict):
        raise LmEvalYamlError(
            "fewshot_config: a mapping (read only with num_fewshot > 0, which CASU refuses)"
        )
    out: dict[str, Any] = {
        "task": d.get("task"),
        "alias": alias,
        "dataset_path": dataset_path,
        "version": version,
        "description": "",
        "tags": [*_as_list(d.get("tag")), *_as_list(d.get("group"))],
        "dataset_config": d.get("dataset_name"),
        "split": d.get("test_split", "test"),
        "output_type": output_type,
        "answer_format": "letter" if mcq else "free_text",
        "prompt_template": "",
        "doc_to_text": prefix + str(d["doc_to_text"]),
        "metrics": _metrics(d.get("metric_list"), output_type),
        "generation": _generation(d.get("generation_kwargs")),
        "lmeval_source": {k: d[k] for k in sorted(IGNORED & set(d))} or None,
    }
    if mcq:
        if isinstance(d["doc_to_choice"], list):  # a fixed list: checked here, not row by row
            check_options([str(x) for x in d["doc_to_choice"]], "doc_to_choice")
        out["doc_to_choice"] = d["doc_to_choice"]
        out["doc_to_target"] = d.get("doc_to_target", "{{answer}}")
    elif "doc_to_target" in d:
        out["doc_to_target"] = d["doc_to_target"]
    return out


def check_template(text: str, field: str) -> None:
    """A Jinja template that parses in the sandbox (task/sandbox.py: `{% include %}`, `{% extends %}`
    and `{% import %}` are refused by name); its names are checked against a row when one is rendered."""
    from jinja2 import TemplateSyntaxError

    from harness.task.sandbox import SandboxError, parse

    try:
        parse(text)
    except TemplateSyntaxError as err:
        raise LmEvalYamlError(
            f"{field}: not a valid Jinja template ({_one_line(err.message or '')}, line {err.lineno})"
        ) from None
    except SandboxError as err:
        raise LmEvalYamlError(f"{field}: {err}") from None
    except (RecursionError, MemoryError):
        raise LmEvalYamlError(f"{field}: the template is nested too deeply to parse") from None


def _one_line(text: object, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render(template: str, doc: dict, field: str) -> str:
    """A Jinja template over one row's columns, in the sandbox (bounded time, size and depth); an
    unknown column is named, and any other failure is one LmEvalYamlError line naming the field."""
    from jinja2 import TemplateError, TemplateSyntaxError, UndefinedError

    from harness.task.sandbox import SandboxError
    from harness.task.sandbox import render as sandboxed

    try:
        return sandboxed(template, doc)
    except UndefinedError as err:
        raise LmEvalYamlError(
            f"{field}: {_one_line(err.message or '')}; columns: {', '.join(sorted(doc))}"
        ) from None
    except TemplateSyntaxError as err:
        raise LmEvalYamlError(
            f"{field}: not a valid Jinja template ({_one_line(err.message or '')}, line {err.lineno})"
        ) from None
    except SandboxError as err:
        raise LmEvalYamlError(f"{field}: {err}") from None
    except TemplateError as err:
        raise LmEvalYamlError(f"{field}: {_one_line(err)}") from None
    except RecursionError:
        raise LmEvalYamlError(f"{field}: the template nests too deeply to render") from None
    except MemoryError:
        raise LmEvalYamlError(f"{field}: the template ran out of memory while rendering") from None
    except Exception as err:  # noqa: BLE001 - any operation of the template (1/0, 'a' + 1): named
        raise LmEvalYamlError(f"{field}: {type(err).__name__}: {_one_line(err)}") from None


def check_options(opts: list[str], where: str) -> list[str]:
    """A multiple-choice question's choices: at least 2, none empty, no text twice (a key that two
    options match, or a question with one answer, scores nothing)."""
    if len(opts) < 2:
        raise LmEvalYamlError(
            f"{where}: {len(opts)} choice(s) {opts!r:.80}; a multiple-choice question needs at least 2"
        )
    for i, o in enumerate(opts):
        if not o.strip():
            raise LmEvalYamlError(f"{where}: choice {i + 1} of {len(opts)} is empty")
    seen: dict[str, int] = {}
    for i, o in enumerate(opts):
        if o in seen:
            raise LmEvalYamlError(
                f"{where}: choices {seen[o] + 1} and {i + 1} are the same text {o[:60]!r}; the options "
                "of a question must differ"
            )
        seen[o] = i
    return opts


def choices(spec, doc: dict) -> list[str]:
    """lm-eval's doc_to_choice: a list, a column name, or a template rendering to a list."""
    if isinstance(spec, list):
        return check_options([str(x) for x in spec], "doc_to_choice")
    if isinstance(spec, str) and spec in doc and isinstance(doc[spec], (list, tuple)):
        return check_options([str(x) for x in doc[spec]], f"doc_to_choice (column {spec!r})")
    text = render(str(spec), doc, "doc_to_choice")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise LmEvalYamlError(f"doc_to_choice: renders to {text[:80]!r}, not a list") from None
    if not isinstance(value, (list, tuple)) or not value:
        raise LmEvalYamlError(f"doc_to_choice: renders to {text[:80]!r}, not a non-empty list")
    return check_options([str(x) for x in value], f"doc_to_choice (renders to {text[:60]!r})")


def target_letter(spec, doc: dict, opts: list[str]) -> str:
    """lm-eval's doc_to_target for multiple choice -> the key's letter: an index, a letter, or the
    text of one of the choices."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        value: Any = spec
    elif isinstance(spec, str) and spec in doc:
        value = doc[spec]
    else:
        value = render(str(spec), doc, "doc_to_target").strip()
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6:
        value = int(value)  # an index; '²' or a 5000-digit number is text (named below)
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < len(opts):
            shown = value if value.bit_length() < 64 else "a huge number"
            raise LmEvalYamlError(
                f"doc_to_target: index {shown} outside the {len(opts)} choices (0..{len(opts) - 1})"
            )
        return LETTERS[value]
    text = value if isinstance(value, str) else (str(value) if _small(value) else type(value).__name__)
    if text in LETTERS[: len(opts)] and len(text) == 1:
        return text
    if text in opts:
        return LETTERS[opts.index(text)]
    raise LmEvalYamlError(
        f"doc_to_target: {text[:60]!r} is not an index (0..{len(opts) - 1}), a letter "
        f"({', '.join(LETTERS[: len(opts)])}) or one of the choices"
    )


def _small(value) -> bool:
    """Whether str(value) is cheap and short (not a 5000-digit number or a huge column value)."""
    if isinstance(value, int):
        return value.bit_length() < 1000
    return isinstance(value, (float, bool)) or value is None
