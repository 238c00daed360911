"""The harness's Python entry point: `simple_evaluate(...) -> Results`, as lm-eval's.

`python -m harness` is a thin layer over it: it parses flags, calls `simple_evaluate`, maps the
errors below to exit codes and prints the table. Every input is checked before any model loads.

Errors: `UsageError` (a bad argument, path, task YAML or dataset; the CLI's exit 2, and
TaskConfigError / DatasetError / ModelArgsError are ValueErrors too) and
`model_adapters.AdapterError` (the model cannot be loaded or run; exit 3).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from model_adapters.base import AdapterError, ModelArgsError, check_model_args, parse_model_args


class UsageError(ValueError):
    """A bad argument or path; the message names the flag (the CLI's exit code 2)."""


@dataclass
class Results:
    """The results document (schema in RESULTS.md, exactly what the CLI writes as
    results_<date>.json), the per-task sample records, and where it was written (or None)."""
    document: dict
    samples: dict[str, list[dict]] = field(default_factory=dict, repr=False)
    path: Path | None = None
    main_process: bool = True  # False on the non-main ranks of a distributed run (nothing written)
    # --hf_hub_log_args push_results_to_hub=true: what push.push_after_run sent (repo, operations,
    # pushed) or, when the Hub failed, `error` and `retry`; None when no push was asked for
    pushed: dict | None = None

    def __getitem__(self, key):
        return self.document[key]

    @property
    def results(self) -> dict:
        """task -> condition -> metrics."""
        return self.document["results"]

    @property
    def errors(self) -> list[dict]:
        return self.document["errors"]

    def lm_eval_view(self) -> dict:
        """The document in lm-eval's results shape (`results[task]["acc,none"]`; see RESULTS.md)."""
        from .lmeval_view import view
        return view(self.document)

    def table(self) -> str:
        from .results import table1
        return table1(self.document)


def make_judge(name: str | None):
    if not name:
        return None
    from casu_dataset.llm.backends import LocalBackend, OpenAIBackend
    if name == "local":
        return LocalBackend()
    if name == "openai":
        return OpenAIBackend()
    raise UsageError(f"--judge {name!r}: use 'local' or 'openai'")


def check_paths(output_path: str | None, cache: str | None) -> None:
    """UsageError when --output_path or --cache cannot be used; creates --output_path."""
    out = output_path
    if out is not None:
        if os.path.exists(out) and not os.path.isdir(out):
            raise UsageError(f"--output_path {out}: is a file, not a folder")
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as err:
            raise UsageError(f"--output_path {out}: cannot create the folder ({err.strerror or err})") from None
    if cache and cache != "off":
        if os.path.isdir(cache):
            raise UsageError(f"--cache {cache}: is a folder; give a file path (e.g. {os.path.join(cache, 'cache.sqlite')})")
        if os.path.isfile(cache) and os.path.getsize(cache) > 0:
            with open(cache, "rb") as f:
                if f.read(16) != b"SQLite format 3\x00":
                    raise UsageError(f"--cache {cache}: not a SQLite database (the harness's response cache); "
                                     "give a new file name or 'off'")


def _tasks(tasks, include_path):
    from .task_config import TaskConfig, load_tasks, select_tasks, with_builtins
    if isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, TaskConfig) for t in tasks):
        return list(tasks)
    spec = ",".join(tasks) if isinstance(tasks, (list, tuple)) else str(tasks)
    return select_tasks(spec, load_tasks(with_builtins(include_path)))


def _conditions(conditions):
    from .conditions import Condition, parse_conditions
    if isinstance(conditions, (list, tuple)) and all(isinstance(c, Condition) for c in conditions):
        return list(conditions)
    return parse_conditions(",".join(conditions) if isinstance(conditions, (list, tuple)) else conditions)


def _open_data(dataset: str, tasks, seed: int):
    from .data import CasuData, DatasetError, is_local
    if is_local(dataset) and not os.path.isdir(os.path.expanduser(str(dataset))):
        raise UsageError(f"--dataset {dataset}: no such folder (build one with `python -m casu_dataset build "
                         f"--out {dataset}`, or give a Hub repo id ORG/NAME)")
    data = CasuData(dataset, seed=seed)
    try:  # the data each task reads is checked before any model loads
        data.check_all(tasks)
    except DatasetError:
        raise
    except (ConnectionError, OSError) as err:  # a Hub id that cannot be fetched
        if is_local(dataset):
            raise DatasetError(str(err)) from None
        offline = " (HF_HUB_OFFLINE=1: offline, only cached datasets load)" \
            if os.environ.get("HF_HUB_OFFLINE") == "1" else ""
        raise DatasetError(f"--dataset {dataset}: cannot load it from the Hub{offline}: {err}") from None
    return data


def run_config(tasks, conditions, *, scene_hint, scoring, circular, batch_size, limit, seed, judge_fp,
               gen_kwargs=None, hf_hub_log_args=None, system_instruction=None, chat_template=None) -> dict:
    """The `config` block of the results document; `task_configs` is each task's full resolved YAML;
    `chat_template` is the adapter's effective --apply_chat_template setting (Adapter.chat_template_setting)."""
    return {"tasks": [t.task for t in tasks], "task_versions": {t.task: t.version for t in tasks},
            "task_configs": {t.task: t.resolved() for t in tasks},
            "conditions": [c.name for c in conditions], "scene_hint": scene_hint, "scoring": scoring,
            "circular": circular, "batch_size": batch_size, "limit": limit, "seed": seed, "judge": judge_fp,
            "world_size": int(os.environ.get("WORLD_SIZE", "1")), "gen_kwargs": gen_kwargs or {},
            "hf_hub_log_args": hf_hub_log_args or {}, "system_instruction": system_instruction,
            **(chat_template or {"apply_chat_template": None, "chat_template_name": None, "chat_template_how": None}),
            "num_fewshot": 0, "fewshot_as_multiturn": False}


def simple_evaluate(model: str, model_args: str | dict | None = None, tasks="all", dataset: str = "casu_mini",
                    conditions="full", limit: int | None = None, output_path: str | Path | None = None,
                    log_samples: bool = False, include_path: list | None = None, batch_size: int = 1,
                    seed: int = 0, scene_hint: bool = False, scoring: str = "auto", circular: bool = False,
                    judge: str | None = None, bert_model: str | None = None, cache: str | None = None,
                    probe: bool = True, device: str | None = None, progress: bool = False,
                    on_cleaned=None, gen_kwargs: str | dict | None = None,
                    hf_hub_log_args: str | dict | None = None, system_instruction: str | None = None,
                    apply_chat_template: bool | str | None = None, num_fewshot: int | None = None,
                    fewshot_as_multiturn: bool = False) -> Results:
    """Evaluate `model` (a registered name or module:Class) on `tasks` ("all", a tag, a comma list,
    a list of names or of TaskConfig) over a built `dataset` folder or Hub repo.

    `output_path`: also write results_<date>.json, results.md, plots (and sample logs with
    `log_samples`) there, as the CLI does; `cache`: the response cache file (default
    <output_path>/cache.sqlite with an output path, else none; "off": none).
    `limit`: an int (samples per task) or a fraction in (0, 1); `batch_size`: an int or "auto";
    `gen_kwargs`: "k=v,..." or a dict merged over each task's generation settings.
    `system_instruction`: every request's system turn; `apply_chat_template`: True or a template
    name (see `Adapter.set_chat_template`); `num_fewshot`: 0 only and `fewshot_as_multiturn`: False
    only (CASU tasks are zero-shot), accepted for lm-eval parity."""
    from . import flags, push
    from .evaluate import EvalOptions, evaluate
    from .metrics import JudgeEventMatcher
    from .parsing import LLMJudge
    from .results import document, write_outputs
    from .runner import distributed_state
    from model_adapters.registry import get_adapter, make_adapter

    task_list = _tasks(tasks, include_path)  # TaskConfigError
    try:
        gen_kw = flags.parse_gen_kwargs(gen_kwargs)
        task_list = flags.apply_gen_kwargs(task_list, gen_kw)
        limit = flags.parse_limit(limit)
        log_args = flags.parse_hub_log_args(hf_hub_log_args)
        push.check_auto_push(log_args, limit=limit, output_path=output_path, log_samples=log_samples)  # PushError
        system = flags.parse_system_instruction(system_instruction)
        template_choice = flags.parse_chat_template(apply_chat_template)
        flags.check_fewshot(num_fewshot, fewshot_as_multiturn)
        conds = _conditions(conditions)
        raw_args = parse_model_args(model_args, raw=True) if isinstance(model_args, str) or model_args is None \
            else dict(model_args)
    except ModelArgsError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None
    if judge not in (None, "local", "openai"):
        raise UsageError(f"--judge {judge!r}: use 'local' or 'openai'")
    if scoring not in ("auto", "generate", "loglikelihood"):
        raise UsageError(f"--scoring {scoring!r}: use auto, generate or loglikelihood")
    if batch_size != "auto" and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise UsageError(f"--batch_size: must be an integer >= 1 or 'auto', got {batch_size!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise UsageError(f"--seed: must be an integer >= 0, got {seed!r}")
    if device:
        raw_args["device"] = device
    try:  # a GPU that is not there fails here, not sample by sample after loading
        flags.check_device(str(raw_args["device"]) if raw_args.get("device") else None)
    except ValueError as err:
        raise UsageError(str(err)) from None
    batch_n, shrink = flags.resolve_batch_size(batch_size, str(raw_args.get("device") or "cpu"))
    cls = get_adapter(model)  # AdapterError: unknown model
    checked_args = check_model_args(cls, model, raw_args)  # ModelArgsError (a usage error)
    check_paths(None if output_path is None else str(output_path), cache)
    data = _open_data(str(dataset), task_list, seed)
    try:
        adapter = make_adapter(model, checked_args)
    except ModelArgsError:
        raise
    except ValueError as err:  # the adapter refused its arguments while loading
        raise AdapterError(str(err)) from None
    try:  # a NAME is checked against the processor's templates (no weights are loaded)
        template = adapter.set_chat_template(template_choice)
    except ValueError as err:
        raise UsageError(str(err)) from None
    backend = make_judge(judge)
    cache_obj = _open_cache(cache, output_path, on_cleaned)
    opts = EvalOptions(conditions=conds, batch_size=batch_n, shrink_on_oom=shrink, limit=limit, scene_hint=scene_hint,
                       scoring=scoring, circular=circular, seed=seed, probe=probe,
                       judge=LLMJudge(backend) if backend else None,
                       event_matcher=JudgeEventMatcher(backend) if backend else None,
                       bert_model=bert_model, progress=progress, system_instruction=system)
    ev = evaluate(adapter, task_list, data, opts, cache_obj)
    dist = distributed_state()
    info = {"name": model, "args": checked_args, "info": adapter.info(), "fingerprint": adapter.fingerprint}
    config = run_config(task_list, conds, scene_hint=scene_hint, scoring=scoring, circular=circular,
                        batch_size=batch_size, limit=limit, seed=seed,
                        judge_fp=backend.fingerprint if backend else None, gen_kwargs=gen_kw,
                        hf_hub_log_args=log_args, system_instruction=system, chat_template=template)
    doc = document(ev, info, config, {"path": str(dataset)})
    res = Results(doc, ev["samples"], main_process=dist is None or dist.is_main_process)
    if output_path is not None and res.main_process:
        res.path = write_outputs(doc, ev["samples"] if log_samples else None, Path(output_path))
        res.pushed = push.push_after_run(res.path, log_args, token=os.environ.get("HF_TOKEN"))  # never raises
    return res


def _open_cache(cache: str | None, output_path, on_cleaned):
    import sqlite3

    from casu_dataset.llm.cache import ResponseCache

    from .outputs import clean_stale
    if output_path is not None:
        for f in clean_stale(output_path):
            if on_cleaned:
                on_cleaned(f)
    if cache == "off" or (cache is None and output_path is None):
        return None
    path = cache or os.path.join(str(output_path), "cache.sqlite")
    try:
        return ResponseCache(path)
    except (sqlite3.Error, OSError) as err:
        raise UsageError(f"--cache {path}: cannot open it as the response cache ({err}); give a new file name "
                         "or 'off'") from None
