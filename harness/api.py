"""The harness's Python entry point: `simple_evaluate(...) -> Results`, as lm-eval's.

`python -m harness` is a thin layer over it: it parses flags, calls `simple_evaluate`, maps the
errors below to exit codes and prints the table. Every input is checked before any model loads.

Errors (casu_dataset.core.errors: each is an InputError, exit 2, or a ModelError, exit 3):
`UsageError` (a bad argument, path, task YAML or dataset; TaskConfigError / LoadError /
ModelArgsError are InputErrors and ValueErrors too) and `model_adapters.AdapterError` (the model
cannot be loaded or run).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from harness.config import VERBOSITY, EvalConfig, UsageError, apply_seeds, check_device, world_size
from harness.paths import check_no_collision, check_paths, output_target
from harness.results import Results
from harness.run_config import run_config

if TYPE_CHECKING:
    from harness.run.schema import Evaluation, ModelRecord, ResultsDocument, Robustness
from model_adapters.base import Adapter, AdapterError, ModelArgsError, parse_model_args

# The public names: simple_evaluate and what it returns here; Results, the path checks and the
# config block live in modules named for them and are re-exported for existing callers.
__all__ = [
    "QUIET_LOGGERS",
    "EvalConfig",
    "Results",
    "UsageError",
    "check_paths",
    "make_judge",
    "robustness_block",
    "run_config",
    "set_verbosity",
    "simple_evaluate",
]

log = logging.getLogger("harness")
# Third-party loggers held at WARNING even under --verbosity DEBUG.
QUIET_LOGGERS = ("matplotlib", "PIL", "urllib3", "filelock", "fsspec", "httpx", "httpcore", "asyncio")


def set_verbosity(level: str | None) -> None:
    """lm-eval's verbosity: DEBUG, INFO, WARNING or ERROR for the harness and the libraries it calls."""
    if level is None:
        return
    if not isinstance(level, str) or level.upper() not in VERBOSITY:
        raise UsageError(f"--verbosity {level!r}: one of DEBUG, INFO, WARNING, ERROR")
    level = level.upper()
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    root.setLevel(level)
    for name in ("transformers", "datasets", "huggingface_hub", "harness", "model_adapters", "casu_dataset"):
        logging.getLogger(name).setLevel(level)
    for name in QUIET_LOGGERS:  # their DEBUG lines (font lists, HTTP pools, locks) bury the run's own
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLevelName(level)))


def make_judge(name: str | None):
    if not name:
        return None
    from casu_dataset.core.llm.backends import LocalBackend, OpenAIBackend

    if name == "local":
        return LocalBackend()
    if name == "openai":
        return OpenAIBackend()
    raise UsageError(f"--judge {name!r}: use 'local' or 'openai'")


def _tasks(tasks, include_path):
    from harness.task.config import TaskConfig, TaskConfigError, load_tasks, select_tasks, with_builtins

    if isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, TaskConfig) for t in tasks):
        return list(tasks)
    spec = ",".join(tasks) if isinstance(tasks, (list, tuple)) else str(tasks)
    skipped: list[TaskConfigError] = []
    loaded = load_tasks(with_builtins(include_path), skipped=skipped)
    try:
        chosen = select_tasks(spec, loaded)
    except TaskConfigError as err:  # one line: the selection, and the files that were skipped
        if not skipped:
            raise
        raise TaskConfigError(f"{err}; task files skipped: {'; '.join(map(str, skipped))}") from None
    for e in skipped:  # lm-eval's habit: a task file that fails is named, the others run
        print(f"warning: skipped a task file: {e}", file=sys.stderr)
    return chosen


def _conditions(conditions: str):
    from harness.run.conditions import parse_conditions

    return parse_conditions(conditions)


def _open_data(dataset: str, tasks, seed: int, full_check: bool = False, flag: str = "--dataset"):
    """The dataset checked for `tasks`; `flag` (`--dataset`, `dataset_path (FILE)`, ...) names where
    it came from in every error."""
    from casu_dataset.formats.reader import LoadError, is_local
    from harness.run.data import CasuData

    if is_local(dataset) and os.path.lexists(os.path.expanduser(str(dataset))):
        from casu_dataset.core.paths import PathError, input_path

        try:  # a symlink loop, a dangling link, a FIFO or a file in its place: named
            input_path(os.path.expanduser(str(dataset)), f"{flag} {dataset}", "folder")
        except PathError as err:
            raise UsageError(str(err)) from None
    if is_local(dataset) and not os.path.isdir(os.path.expanduser(str(dataset))):
        raise UsageError(
            f"{flag} {dataset}: no such folder (build one with `python -m casu_dataset build "
            f"--out {dataset}`, or give a Hub repo id ORG/NAME)"
        )
    if full_check and not is_local(dataset):
        raise UsageError(
            f"--check_integrity: {dataset} is a Hub repo; the check reads a built folder's record "
            "(download it, or drop the flag)"
        )
    data = CasuData(dataset, seed=seed, full_check=full_check, flag=flag)
    try:  # the data each task reads is checked before any model loads
        data.check_all(tasks)
    except LoadError:
        raise
    except Exception as err:  # noqa: BLE001 - a Hub id that cannot be fetched: one line naming the flag
        from casu_dataset.core.hub import is_network_error

        if not isinstance(err, (ConnectionError, OSError)) and not is_network_error(err):
            raise
        if is_local(dataset):
            raise LoadError(str(err)) from None
        offline = (
            " (HF_HUB_OFFLINE=1: offline, only cached datasets load)"
            if os.environ.get("HF_HUB_OFFLINE") == "1"
            else ""
        )
        raise LoadError(f"{flag} {dataset}: cannot load it from the Hub{offline}: {err}") from None
    return data


def simple_evaluate(
    model: Any = None,
    model_args: str | dict | None = None,
    *,
    config: EvalConfig | None = None,
    on_cleaned: Callable[[Path], None] | None = None,
    evaluation_tracker: Any = None,
    **keywords: Any,
) -> Results:
    """Evaluate a model on CASU tasks: `simple_evaluate(config)` with an `EvalConfig`, or lm-eval's
    `simple_evaluate(model, model_args, tasks=..., ...)` with its keywords (every field of
    `EvalConfig`; given beside a config, they replace its values). Returns `Results`: lm-eval's
    results dict (`res["results"][task]["acc,none"]`) with CASU's document beside it.

    `model`: a registered name, `module:Class`, or an already built adapter (a notebook loads a 7B
    model once and passes it to every call). `tasks`: "all", a tag, a comma list, a list of names
    or of TaskConfig, over a built `dataset` folder or Hub repo.
    `output_path`: also write the run's files there, as the CLI does (a folder; lm-eval's
    `results_<date>.json`, CASU's `casu_results_<date>.json`, report, plots, and with
    `log_samples` both kinds of sample logs); `cache`: the response cache file (default
    <output_path>/cache.sqlite with an output path, else none; "off": none).
    `limit`: an int (samples per task) or a fraction in (0, 1); `batch_size`: an int, "auto" or "auto:N"
    (`max_batch_size` caps an automatic size);
    `gen_kwargs`: "k=v,..." or a dict merged over each task's generation settings.
    `system_instruction`: every request's system turn; `apply_chat_template`: True or a template
    name (see `Adapter.set_chat_template`); `num_fewshot`: 0 only and `fewshot_as_multiturn`: False
    only (CASU tasks are zero-shot), accepted for lm-eval parity.

    lm-eval's keywords: `random_seed` (= `seed`), `numpy_random_seed`, `torch_random_seed` (seeded
    as lm-eval seeds them; default 1234), `fewshot_random_seed` (recorded; zero-shot),
    `bootstrap_iters` (resamples of every interval, default 1000; 0: no intervals, stderr "N/A"),
    `predict_only` (the model's outputs and sample logs, no metrics; implies `log_samples`),
    `use_cache` (a response cache file, as `cache`), `write_out` (print each task's first prompt),
    `evaluation_tracker` (lm-eval's EvaluationTracker: its
    `general_config_tracker.log_experiment_args` is called as lm-eval does, and its `output_path` is
    used when `output_path` is not given), `verbosity` (log level).
    `on_cleaned`: called with each temporary file a killed run left in `output_path` and this run
    removed.

    `robustness_dataset`: a second realization of `dataset` (`casu build --realization 2`: the same
    items, other recordings of the same sound types). The model is evaluated on it too (same tasks,
    conditions, limit and response cache; no second audio probe) and every multiple-choice task
    gets `recording_consistency` (metrics.recording_consistency: the share of contrast families
    answered the same on both, with each realization's family accuracy); the document's
    `robustness` names both datasets (path, fingerprint, identity), holds the second realization's
    results and the consistency over all tasks (`overall`)."""
    if isinstance(model, EvalConfig):
        if config is not None:
            raise UsageError("simple_evaluate: give the EvalConfig once (first argument or config=)")
        config, model = model, None
    given = {k: v for k, v in (("model", model), ("model_args", model_args)) if v is not None}
    given.update(keywords)
    tracker_out = getattr(evaluation_tracker, "output_path", None) if evaluation_tracker is not None else None
    if tracker_out and given.get("output_path") is None and (config is None or config.output_path is None):
        given["output_path"] = str(tracker_out)
    if config is None:
        config = EvalConfig(**given)
    elif given:
        config = config.replace(**given)
    if config.model is None:
        raise UsageError(
            "model: required; give an adapter name (see `python -m harness list`), module:Class, or a "
            "model_adapters.Adapter instance"
        )
    return _evaluate(config, on_cleaned, evaluation_tracker)


def _evaluate(config: EvalConfig, on_cleaned, evaluation_tracker) -> Results:
    from harness.config import resolve_batch_size
    from harness.output import hub
    from harness.output.document import document, run_groups
    from harness.output.writer import write_outputs
    from harness.run.evaluate import evaluate
    from harness.run.runner import distributed_state
    from harness.scoring import metrics
    from harness.task.config import TaskConfigError, apply_gen_kwargs, dataset_of
    from model_adapters.registry import instantiate, resolve_adapter

    started = time.time()
    c = config
    world_size()  # WORLD_SIZE / RANK / LOCAL_RANK checked before anything loads (UsageError)
    set_verbosity(c.verbosity)
    seeded = apply_seeds(c)  # python random, numpy, torch: as lm-eval's simple_evaluate, first
    if seeded:
        log.info(seeded)
    given = c.model if isinstance(c.model, Adapter) else None
    task_list = _tasks(c.tasks, c.include_path)  # TaskConfigError
    try:
        task_list = apply_gen_kwargs(task_list, c.gen_kwargs)
        hub.check_auto_push(
            c.hf_hub_log_args, limit=c.limit, output_path=c.output_path, log_samples=c.log_samples
        )  # PushError
        conds = _conditions(c.conditions)
        if given is not None:
            raw_args = dict(given.model_args)
        else:
            raw_args = (
                parse_model_args(c.model_args, raw=True)
                if isinstance(c.model_args, str) or c.model_args is None
                else dict(c.model_args)
            )
    except ModelArgsError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None
    if c.device:
        raw_args["device"] = c.device
    try:  # a GPU that is not there fails here, not sample by sample after loading
        check_device(str(raw_args["device"]) if raw_args.get("device") else None)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if c.trust_remote_code:
        raw_args["trust_remote_code"] = "true" if _trust_remote_code(c.model, raw_args) else "false"
    if given is None:
        cls, checked_args = resolve_adapter(c.model, raw_args)  # AdapterError / ModelArgsError
    else:
        checked_args = raw_args
    _check_sampling(task_list, type(given) if given is not None else cls, given.name if given else c.model)
    try:  # --dataset, else the one dataset_path the tasks name (TaskConfigError names both files)
        dataset, dataset_flag = dataset_of(task_list, c.dataset)
    except TaskConfigError as err:
        raise UsageError(str(err)) from None
    robustness_dataset, output_path, cache = c.robustness_dataset, c.output_path, c.cache
    if c.wandb_args is not None:
        from harness.output.wandb_log import check_available

        try:
            check_available()
        except ImportError as err:
            raise UsageError(str(err)) from None
    check_no_collision(output_path, cache, dataset, robustness_dataset)
    check_paths(output_path, cache)
    log.info(
        "tasks %s; conditions %s; dataset %s", [t.task for t in task_list], [x.name for x in conds], dataset
    )
    data = _open_data(dataset, task_list, c.seed, c.check_integrity, dataset_flag)
    second_data = None  # --robustness_dataset: the second realization, evaluated the same way
    if robustness_dataset is not None:
        second_data = _open_data(
            robustness_dataset, task_list, c.seed, c.check_integrity, "--robustness_dataset"
        )
        same_path = os.path.realpath(os.path.expanduser(robustness_dataset)) == os.path.realpath(
            os.path.expanduser(dataset)
        )
        ids = (data.identity or {}).get("sha256"), (second_data.identity or {}).get("sha256")
        if same_path or (ids[0] is not None and ids[0] == ids[1]):
            raise UsageError(
                f"--robustness_dataset {robustness_dataset}: the same data as --dataset {dataset} (dataset "
                "identity equal); give the second realization "
                "(`python -m casu_dataset build --realization 2`)"
            )
    template_choice = c.apply_chat_template  # parsed by EvalConfig: None, True or a name
    if given is not None:
        adapter = given
        if not isinstance(template_choice, str):
            adapter.chat_template_name = None  # a name chosen by an earlier call does not carry over
    else:
        try:
            adapter = instantiate(cls, c.model, checked_args)
        except ModelArgsError:
            raise
        except ValueError as err:  # the adapter refused its arguments while loading
            raise AdapterError(str(err)) from None
    name = adapter.name if given is not None else c.model
    log.info("model %s (%s), fingerprint %s", name, checked_args, adapter.fingerprint)
    try:  # a NAME is checked against the processor's templates (no weights are loaded)
        template = adapter.set_chat_template(template_choice)
    except ValueError as err:
        raise UsageError(str(err)) from None
    backend = make_judge(c.judge)
    cache_obj = _open_cache(cache, output_path, on_cleaned, c.cache_requests)
    batch = resolve_batch_size(c.batch_size, str(raw_args.get("device") or "cpu"), c.max_batch_size)
    iters = metrics.BOOTSTRAP if c.bootstrap_iters is None else c.bootstrap_iters
    token = metrics.BOOTSTRAP_ITERS.set(iters)
    second_ev = None
    try:
        robustness: dict | None = None
        if second_data is not None:  # the second realization first: its records feed recording_consistency
            log.info("evaluating the second realization %s", robustness_dataset)
            second_ev = evaluate(
                adapter,
                task_list,
                second_data,
                c.replace(probe=False),
                cache_obj,
                conditions=conds,
                judge=backend,
                batch=batch,
            )
            robustness = {}
            for t, recs in second_ev["samples"].items():
                for r in recs:
                    robustness.setdefault((t, r.condition), []).append(r)
        ev = evaluate(
            adapter,
            task_list,
            data,
            c,
            cache_obj,
            conditions=conds,
            judge=backend,
            batch=batch,
            robustness=robustness,
        )
    finally:
        metrics.BOOTSTRAP_ITERS.reset(token)
    if second_ev is not None:
        _check_paired(ev, second_ev, dataset, robustness_dataset)
    ended = time.time()
    if c.write_out:
        for t, recs in ev["samples"].items():
            if recs:
                print(f"--- {t}: first prompt ({recs[0].id}, {recs[0].condition}) ---\n{recs[0].prompt}")
    dist = distributed_state()
    info: ModelRecord = {
        "name": name,
        "args": checked_args,
        "info": adapter.info(),
        "fingerprint": adapter.fingerprint,
        "meta": adapter.model_meta(),
        "tokenizer": adapter.tokenizer_info(),
        "chat_template": adapter.chat_template_text(),
    }
    run = run_config(
        task_list,
        conds,
        scene_hint=c.scene_hint,
        scoring=c.scoring,
        circular=c.circular,
        batch_size=c.batch_size,
        limit=c.limit,
        seed=c.seed,
        judge_fp=backend.fingerprint if backend else None,
        gen_kwargs=c.gen_kwargs,
        hf_hub_log_args=c.hf_hub_log_args,
        system_instruction=c.system_instruction,
        chat_template=template,
    )
    run.update(
        bootstrap_iters=iters,
        use_cache=cache
        if cache not in (None, "off")
        else (
            os.path.join(output_path, "cache.sqlite") if output_path is not None and cache is None else None
        ),
        predict_only=bool(c.predict_only),
        random_seed=c.random_seed,
        numpy_random_seed=c.numpy_random_seed,
        torch_random_seed=c.torch_random_seed,
        fewshot_random_seed=c.fewshot_random_seed,
    )
    if second_ev is not None:
        run["robustness_dataset"] = robustness_dataset
    doc = document(
        ev,
        info,
        run,
        {"path": dataset, "named_by": dataset_flag},
        run_times={"start": started, "end": ended},
        groups=run_groups(task_list),
    )
    if second_ev is not None:
        doc["robustness"] = robustness_block(ev, second_ev, dataset, str(robustness_dataset), c.seed)
        if second_ev["errors"]:  # failed on the second realization: the run has errors too (exit 4, rerun)
            doc["errors"] = doc["errors"] + [{**e, "dataset": "realization2"} for e in second_ev["errors"]]
            doc["n_errors"], doc["status"] = len(doc["errors"]), "errors"
    res = Results(
        doc, ev["samples"], main_process=dist is None or dist.is_main_process, log_samples=c.log_samples
    )
    tracker = getattr(evaluation_tracker, "general_config_tracker", None)
    if tracker is not None and hasattr(tracker, "log_experiment_args"):  # as lm-eval's simple_evaluate does
        tracker.log_experiment_args(
            model_source=name,
            model_args=res["config"]["model_args"],
            system_instruction=c.system_instruction,
            chat_template=res["chat_template"],
            fewshot_as_multiturn=bool(c.fewshot_as_multiturn),
        )
    if output_path is not None and res.main_process:
        res.path = write_outputs(doc, ev["samples"] if c.log_samples else None, Path(output_path))
        res["casu"]["document"] = res.path.name
        log.info("wrote %s", res.path)
        res.pushed = hub.push_after_run(res.path, c.hf_hub_log_args, token=os.environ.get("HF_TOKEN"))
    if c.wandb_args is not None and res.main_process:
        res.wandb = _log_wandb(doc, res.samples if c.log_samples else None, c.wandb_args, res.path)
    return res


def _check_paired(ev: Evaluation, second_ev: Evaluation, dataset, robustness_dataset) -> None:
    """Refuse a second realization whose questions are not the first one's (by row id)."""
    if ev["dataset_fingerprint"] == second_ev["dataset_fingerprint"]:
        raise UsageError(
            f"--robustness_dataset {robustness_dataset}: the same bytes as --dataset {dataset}; give the "
            "second realization (`python -m casu_dataset build --realization 2`)"
        )
    ids1 = {r.id for recs in ev["samples"].values() for r in recs}
    ids2 = {r.id for recs in second_ev["samples"].values() for r in recs}
    if ids1 and not ids1 & ids2:
        raise UsageError(
            f"--robustness_dataset {robustness_dataset}: none of its question ids is in --dataset {dataset}: "
            "not a realization of the same dataset"
        )


def robustness_block(
    ev: Evaluation, second_ev: Evaluation, dataset: str, robustness_dataset: str, seed: int = 0
) -> Robustness:
    """The results document's `robustness`: both datasets, the second realization's results and
    recording_consistency over all multiple-choice tasks together, per condition (a family counts
    as the same only if every question of every task it has is)."""
    from harness.scoring.metrics import recording_consistency

    overall: dict[str, dict] = {}
    conds = list(dict.fromkeys(r.condition for recs in ev["samples"].values() for r in recs))
    for c in conds:
        a = [r.to_dict() for recs in ev["samples"].values() for r in recs if r.condition == c and r.options]
        b = [
            r.to_dict()
            for recs in second_ev["samples"].values()
            for r in recs
            if r.condition == c and r.options
        ]
        v = recording_consistency(a, b, seed=seed)
        if v is not None:
            overall[c] = v
    return {
        "metric": "recording_consistency",
        "realization1": {
            "path": dataset,
            "fingerprint": ev["dataset_fingerprint"],
            "identity": ev.get("dataset_identity"),
        },
        "realization2": {
            "path": robustness_dataset,
            "fingerprint": second_ev["dataset_fingerprint"],
            "identity": second_ev.get("dataset_identity"),
            "results": second_ev["results"],
            "evaluated": second_ev["evaluated"],
            "n_errors": len(second_ev["errors"]),
            "errors": second_ev["errors"],
        },
        "overall": overall,
    }


def _check_sampling(tasks, cls, name: str) -> None:
    """A sampling setting (top_p, top_k) the adapter does not pass to its model is refused, named,
    before anything loads: lm-eval would silently drop it."""
    for t in tasks:
        for key in ("top_p", "top_k"):
            if getattr(t.generation, key) is not None and key not in cls.sampling_settings:
                takes = ", ".join(sorted(cls.sampling_settings)) or "none of them"
                raise UsageError(
                    f"--gen_kwargs {key} (task {t.task}): {name} does not pass {key} to its model "
                    f"(it takes max_new_tokens, do_sample, temperature, until; sampling settings: {takes})"
                )


def _log_wandb(doc: ResultsDocument, samples, wandb_args: dict, path) -> str | None:
    """--wandb_args: the finished run logged to W&B; a failure there is one warning line, the
    results already written stay (None)."""
    from harness.output.wandb_log import log_run

    try:
        where = log_run(doc, samples, wandb_args, path)
    except Exception as err:  # noqa: BLE001 - W&B is a mirror of results already on disk
        print(
            f"warning: --wandb_args: the run was not logged to W&B ({type(err).__name__}: {err})",
            file=sys.stderr,
        )
        return None
    log.info("logged to W&B: %s", where)
    return where


class _Refreshing:
    """--cache_requests refresh: every request goes to the model; its answer replaces the cached one."""

    def __init__(self, cache):
        self.cache = cache

    def get(self, key: str):
        return None

    def put(self, key: str, value: str) -> None:
        self.cache.put(key, value)


def _trust_remote_code(model, raw_args: dict) -> bool:
    """lm-eval's --trust_remote_code: the adapter's own `trust_remote_code` argument; refused for an
    adapter that loads no remote code, naming it."""
    from model_adapters.base import adapter_params
    from model_adapters.registry import get_adapter

    if isinstance(model, Adapter):
        raise UsageError(
            f"--trust_remote_code with an adapter instance ({model.name}): build it with "
            "trust_remote_code=True"
        )
    if "trust_remote_code" not in adapter_params(get_adapter(model))[0]:
        raise UsageError(
            f"--trust_remote_code: {model} loads no code from the Hub (it has no trust_remote_code "
            "argument); drop the flag"
        )
    if str(raw_args.get("trust_remote_code", "true")).lower() in ("false", "0", "no"):
        raise UsageError("--trust_remote_code and --model_args trust_remote_code=false: give one of them")
    return True


def _open_cache(cache: str | None, output_path, on_cleaned, cache_requests: str | None = None):
    import sqlite3

    from casu_dataset.core.llm.cache import ResponseCache
    from harness.output.files import clean_stale

    if output_path is not None:
        for f in clean_stale(output_path):
            if on_cleaned:
                on_cleaned(f)
    if cache == "off" or (cache is None and output_path is None):
        return None
    path = cache or os.path.join(str(output_path), "cache.sqlite")
    output_target(path, f"--cache {path}", "file")
    if cache_requests == "delete" and os.path.isfile(path):
        os.remove(path)
        log.info("--cache_requests delete: removed %s", path)
    try:
        opened = ResponseCache(path)
        return _Refreshing(opened) if cache_requests == "refresh" else opened
    except (sqlite3.Error, OSError) as err:
        from casu_dataset.core.errors import ResourceError, resource_message

        full = resource_message(err, f"--cache {path}")
        if full:
            raise ResourceError(f"--cache {path}: {full}") from None
        raise UsageError(
            f"--cache {path}: cannot open it as the response cache ({err}); give a new file name or 'off'"
        ) from None
