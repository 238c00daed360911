"""The harness's Python entry point: `simple_evaluate(...) -> Results`, as lm-eval's.

`python -m harness` is a thin layer over it: it parses flags, calls `simple_evaluate`, maps the
errors below to exit codes and prints the table. Every input is checked before any model loads.

Errors: `UsageError` (a bad argument, path, task YAML or dataset; the CLI's exit 2, and
TaskConfigError / DatasetError / ModelArgsError are ValueErrors too) and
`model_adapters.AdapterError` (the model cannot be loaded or run; exit 3).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from casu_dataset.core.errors import CasuError
from model_adapters.base import (
    Adapter,
    AdapterError,
    ModelArgsError,
    check_model_args,
    parse_model_args,
)

log = logging.getLogger("harness")


# lm-eval's default is 100,000; ten times that still fits in memory for every CASU task.
MAX_BOOTSTRAP_ITERS = 1_000_000


class UsageError(CasuError, ValueError):
    """A bad argument or path; the message names the flag (the CLI's exit code 2)."""


class Results(dict):
    """What `simple_evaluate` returns: lm-eval's results dict (`res["results"][task]["acc,none"]`,
    `res["config"]`, `res["versions"]`, `res["n-samples"]`, ..., and `res["samples"]` in lm-eval's
    sample schema with `log_samples`; exactly lm-eval's `results_<date>.json`, see
    harness/RESULTS.md), plus CASU's own:

    - `document`: CASU's results document (casu_results_<date>.json; `res.results` is its
      task -> condition -> metrics, `res["model"]`, `res["timing"]`, ... read it for keys lm-eval
      does not have);
    - `samples`: CASU's per-task sample records (casu_samples_<task>_<date>.jsonl);
    - `path`: CASU's JSON as written (None without output_path); `pushed`: what the push at the
      end of the run sent (None when none was asked for); `table()`: table 1."""

    def __init__(
        self,
        document: dict,
        samples: dict[str, list[dict]] | None = None,
        path: Path | None = None,
        main_process: bool = True,
        pushed: dict | None = None,
        log_samples: bool = False,
    ):
        from harness.lmeval_view import sample_lines, view

        super().__init__(view(document))
        self.document = document
        self.samples = samples or {}
        self.path = path
        self.main_process = main_process  # False on the non-main ranks of a distributed run (nothing written)
        # --hf_hub_log_args push_results_to_hub=true: what push.push_after_run sent (repo, operations,
        # pushed) or, when the Hub failed, `error` and `retry`; None when no push was asked for
        self.pushed = pushed
        if log_samples:
            gen = document.get("generation") or {}
            self["samples"] = {t: sample_lines(t, recs, gen.get(t)) for t, recs in self.samples.items()}

    def __missing__(self, key):
        return self.document[key]  # CASU's keys lm-eval does not have (model, timing, errors, ...)

    def __repr__(self) -> str:
        return (
            f"Results(model={self.get('model_name')!r}, tasks={list(self.get('results', {}))}, "
            f"status={self.document.get('status')!r}, path={str(self.path) if self.path else None!r})"
        )

    @property
    def results(self) -> dict:
        """CASU's task -> condition -> metrics (`res["results"]` is lm-eval's task -> "acc,none")."""
        return self.document["results"]

    @property
    def errors(self) -> list[dict]:
        return self.document["errors"]

    def lm_eval_view(self) -> dict:
        """lm-eval's results JSON as written (`results_<date>.json`), without `samples`."""
        return {k: v for k, v in self.items() if k != "samples"}

    def table(self) -> str:
        from harness.results import table1

        return table1(self.document)


def set_verbosity(level: str | None) -> None:
    """lm-eval's verbosity: DEBUG, INFO, WARNING or ERROR for the harness and the libraries it calls."""
    if level is None:
        return
    if not isinstance(level, str) or level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise UsageError(f"--verbosity {level!r}: one of DEBUG, INFO, WARNING, ERROR")
    level = level.upper()
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    root.setLevel(level)
    for name in ("transformers", "datasets", "huggingface_hub", "harness", "model_adapters", "casu_dataset"):
        logging.getLogger(name).setLevel(level)


def make_judge(name: str | None):
    if not name:
        return None
    from casu_dataset.core.llm.backends import LocalBackend, OpenAIBackend

    if name == "local":
        return LocalBackend()
    if name == "openai":
        return OpenAIBackend()
    raise UsageError(f"--judge {name!r}: use 'local' or 'openai'")


def _check_no_collision(output_path, cache, dataset, robustness_dataset) -> None:
    """UsageError when --output_path or --cache is, holds or lies inside a dataset folder (the run
    would write its results and cache into the data it reads)."""
    from casu_dataset.core.paths import collision, describe

    local = {
        flag: d
        for flag, d in (("--dataset", dataset), ("--robustness_dataset", robustness_dataset))
        if d is not None and os.path.exists(os.path.expanduser(str(d)))
    }
    outs = {"--output_path": output_path, "--cache": cache if cache not in (None, "off") else None}
    clash = collision(outs, local)
    if clash:
        raise UsageError(describe(clash))


def check_paths(output_path: str | None, cache: str | None) -> None:
    """UsageError when --output_path or --cache cannot be used; creates --output_path."""
    out = output_path
    if out is not None:
        if out.lower().endswith((".json", ".jsonl")) and not os.path.isdir(out):
            raise UsageError(
                f"--output_path {out}: give a folder, not a file name (a run writes several files "
                f"under <folder>/<model>/: lm-eval's results_<date>.json, CASU's casu_results_<date>.json, "
                f"sample logs, report, plots); e.g. --output_path {os.path.splitext(out)[0] or 'results'}"
            )
        if os.path.exists(out) and not os.path.isdir(out):
            raise UsageError(f"--output_path {out}: is a file, not a folder")
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as err:
            raise UsageError(
                f"--output_path {out}: cannot create the folder ({err.strerror or err})"
            ) from None
    if cache and cache != "off":
        if os.path.isdir(cache):
            raise UsageError(
                f"--cache {cache}: is a folder; give a file path (e.g. {os.path.join(cache, 'cache.sqlite')})"
            )
        if os.path.isfile(cache) and os.path.getsize(cache) > 0:
            with open(cache, "rb") as f:
                if f.read(16) != b"SQLite format 3\x00":
                    raise UsageError(
                        f"--cache {cache}: not a SQLite database (the harness's response cache); "
                        "give a new file name or 'off'"
                    )


def _tasks(tasks, include_path):
    from harness.task_config import TaskConfig, load_tasks, select_tasks, with_builtins

    if isinstance(tasks, (list, tuple)) and tasks and all(isinstance(t, TaskConfig) for t in tasks):
        return list(tasks)
    spec = ",".join(tasks) if isinstance(tasks, (list, tuple)) else str(tasks)
    return select_tasks(spec, load_tasks(with_builtins(include_path)))


def _conditions(conditions):
    from harness.conditions import Condition, parse_conditions

    if isinstance(conditions, (list, tuple)) and all(isinstance(c, Condition) for c in conditions):
        return list(conditions)
    return parse_conditions(",".join(conditions) if isinstance(conditions, (list, tuple)) else conditions)


def _open_data(dataset: str, tasks, seed: int):
    from casu_dataset.dataset.reader import is_local
    from harness.data import CasuData, DatasetError

    if is_local(dataset) and not os.path.isdir(os.path.expanduser(str(dataset))):
        raise UsageError(
            f"--dataset {dataset}: no such folder (build one with `python -m casu_dataset build "
            f"--out {dataset}`, or give a Hub repo id ORG/NAME)"
        )
    data = CasuData(dataset, seed=seed)
    try:  # the data each task reads is checked before any model loads
        data.check_all(tasks)
    except DatasetError:
        raise
    except Exception as err:  # noqa: BLE001 - a Hub id that cannot be fetched: one line naming the flag
        from casu_dataset.core.hub import is_network_error

        if not isinstance(err, (ConnectionError, OSError)) and not is_network_error(err):
            raise
        if is_local(dataset):
            raise DatasetError(str(err)) from None
        offline = (
            " (HF_HUB_OFFLINE=1: offline, only cached datasets load)"
            if os.environ.get("HF_HUB_OFFLINE") == "1"
            else ""
        )
        raise DatasetError(f"--dataset {dataset}: cannot load it from the Hub{offline}: {err}") from None
    return data


def run_config(
    tasks,
    conditions,
    *,
    scene_hint,
    scoring,
    circular,
    batch_size,
    limit,
    seed,
    judge_fp,
    gen_kwargs=None,
    hf_hub_log_args=None,
    system_instruction=None,
    chat_template=None,
) -> dict:
    """The `config` block of the results document; `task_configs` is each task's full resolved YAML;
    `chat_template` is the adapter's effective --apply_chat_template setting
    (Adapter.chat_template_setting)."""
    return {
        "tasks": [t.task for t in tasks],
        "task_versions": {t.task: t.version for t in tasks},
        "task_configs": {t.task: t.resolved() for t in tasks},
        "conditions": [c.name for c in conditions],
        "scene_hint": scene_hint,
        "scoring": scoring,
        "circular": circular,
        "batch_size": batch_size,
        "limit": limit,
        "seed": seed,
        "judge": judge_fp,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "gen_kwargs": gen_kwargs or {},
        "hf_hub_log_args": hf_hub_log_args or {},
        "system_instruction": system_instruction,
        **(
            chat_template
            or {"apply_chat_template": None, "chat_template_name": None, "chat_template_how": None}
        ),
        "num_fewshot": 0,
        "fewshot_as_multiturn": False,
    }


def _seed(seed, random_seed, numpy_random_seed, torch_random_seed) -> int:
    """CASU's one seed (numpy, torch, the bootstrap, the random baseline): `seed`, or lm-eval's
    `random_seed`; lm-eval's numpy/torch seeds must agree with it (CASU does not seed them apart)."""
    if random_seed is not None:
        if seed not in (0, None) and seed != random_seed:
            raise UsageError(
                f"random_seed={random_seed!r} and seed={seed!r}: give one (they are the same seed)"
            )
        seed = random_seed
    for name, v in (("numpy_random_seed", numpy_random_seed), ("torch_random_seed", torch_random_seed)):
        if v is not None and v != seed:
            raise UsageError(
                f"{name}={v!r}: CASU seeds numpy and torch with its one seed ({seed!r}); give the same "
                "value or leave it out"
            )
    return seed


def simple_evaluate(
    model,
    model_args: str | dict | None = None,
    tasks="all",
    dataset: str = "casu_mini",
    conditions="full",
    limit: int | float | None = None,
    output_path: str | Path | None = None,
    log_samples: bool = False,
    include_path: list | None = None,
    batch_size: int = 1,
    seed: int = 0,
    scene_hint: bool = False,
    scoring: str = "auto",
    circular: bool = False,
    judge: str | None = None,
    bert_model: str | None = None,
    cache: str | None = None,
    probe: bool = True,
    device: str | None = None,
    progress: bool = False,
    on_cleaned=None,
    gen_kwargs: str | dict | None = None,
    hf_hub_log_args: str | dict | None = None,
    system_instruction: str | None = None,
    apply_chat_template: bool | str | None = None,
    num_fewshot: int | None = None,
    fewshot_as_multiturn: bool = False,
    *,
    random_seed: int | None = None,
    numpy_random_seed: int | None = None,
    torch_random_seed: int | None = None,
    fewshot_random_seed: int | None = None,
    bootstrap_iters: int | None = None,
    predict_only: bool = False,
    use_cache: str | None = None,
    write_out: bool = False,
    evaluation_tracker=None,
    verbosity: str | None = None,
    robustness_dataset: str | None = None,
) -> Results:
    """Evaluate `model` (a registered name, `module:Class`, or an already built adapter: a notebook
    loads a 7B model once and passes it to every call) on `tasks` ("all", a tag, a comma list, a
    list of names or of TaskConfig) over a built `dataset` folder or Hub repo. Returns `Results`:
    lm-eval's results dict (`res["results"][task]["acc,none"]`) with CASU's document beside it.

    `output_path`: also write the run's files there, as the CLI does (a folder; lm-eval's
    `results_<date>.json`, CASU's `casu_results_<date>.json`, report, plots, and with
    `log_samples` both kinds of sample logs); `cache`: the response cache file (default
    <output_path>/cache.sqlite with an output path, else none; "off": none).
    `limit`: an int (samples per task) or a fraction in (0, 1); `batch_size`: an int or "auto";
    `gen_kwargs`: "k=v,..." or a dict merged over each task's generation settings.
    `system_instruction`: every request's system turn; `apply_chat_template`: True or a template
    name (see `Adapter.set_chat_template`); `num_fewshot`: 0 only and `fewshot_as_multiturn`: False
    only (CASU tasks are zero-shot), accepted for lm-eval parity.

    lm-eval's keywords: `random_seed` (= `seed`; `numpy_random_seed` / `torch_random_seed` must
    equal it), `fewshot_random_seed` (recorded; zero-shot), `bootstrap_iters` (resamples of every
    interval, default 1000; 0: no intervals, stderr "N/A"), `predict_only` (the model's outputs
    and sample logs, no metrics; implies `log_samples`), `use_cache` (a response cache file, as
    `cache`), `write_out` (print each task's first prompt), `evaluation_tracker` (lm-eval's
    EvaluationTracker: its `general_config_tracker.log_experiment_args` is called as lm-eval does,
    and its `output_path` is used when `output_path` is not given), `verbosity` (log level).

    `robustness_dataset`: a second realization of `dataset` (`casu build --realization 2`: the same
    items, other recordings of the same sound types). The model is evaluated on it too (same tasks,
    conditions, limit and response cache; no second audio probe) and every multiple-choice task
    gets `recording_consistency` (metrics.recording_consistency: the share of contrast families
    answered the same on both, with each realization's family accuracy); the document's
    `robustness` names both datasets (path, fingerprint, identity), holds the second realization's
    results and the consistency over all tasks (`overall`)."""
    from harness import flags, push
    from harness import metrics as M
    from harness.evaluate import EvalOptions, evaluate
    from harness.metrics import JudgeEventMatcher
    from harness.parsing import LLMJudge
    from harness.results import document, write_outputs
    from harness.runner import distributed_state
    from model_adapters.registry import get_adapter, make_adapter

    started = time.time()
    set_verbosity(verbosity)
    given = model if isinstance(model, Adapter) else None
    if given is None and not isinstance(model, str):
        raise UsageError(
            f"model={type(model).__name__}: give an adapter name (see `python -m harness list`), "
            "module:Class, or a model_adapters.Adapter instance"
        )
    if given is not None and (model_args not in (None, "", {}) or device is not None):
        raise UsageError(
            f"model_args/device with an adapter instance ({given.name}): it is already built with "
            f"{given.model_args}; give a name and model_args instead, or leave them out"
        )
    if bootstrap_iters is not None and (
        not isinstance(bootstrap_iters, int)
        or isinstance(bootstrap_iters, bool)
        or not 0 <= bootstrap_iters <= MAX_BOOTSTRAP_ITERS
    ):
        raise UsageError(
            f"bootstrap_iters={bootstrap_iters!r}: an integer in 0..{MAX_BOOTSTRAP_ITERS:,} (0: no "
            "intervals; each interval draws this many resamples of every task's samples, so 1e9 would "
            "need tens of GB)"
        )
    if use_cache is not None:
        if cache is not None and cache != use_cache:
            raise UsageError(
                f"use_cache={use_cache!r} and cache={cache!r}: give one (the response cache file)"
            )
        cache = str(use_cache)
    if evaluation_tracker is not None and output_path is None:
        output_path = getattr(evaluation_tracker, "output_path", None) or None
    if predict_only:
        log_samples = True
    seed = _seed(seed, random_seed, numpy_random_seed, torch_random_seed)
    task_list = _tasks(tasks, include_path)  # TaskConfigError
    try:
        gen_kw = flags.parse_gen_kwargs(gen_kwargs)
        task_list = flags.apply_gen_kwargs(task_list, gen_kw)
        limit = flags.parse_limit(limit)
        log_args = flags.parse_hub_log_args(hf_hub_log_args)
        push.check_auto_push(
            log_args, limit=limit, output_path=output_path, log_samples=log_samples
        )  # PushError
        system = flags.parse_system_instruction(system_instruction)
        template_choice = flags.parse_chat_template(apply_chat_template)
        flags.check_fewshot(num_fewshot, fewshot_as_multiturn)
        conds = _conditions(conditions)
        if given is not None:
            raw_args = dict(given.model_args)
        else:
            raw_args = (
                parse_model_args(model_args, raw=True)
                if isinstance(model_args, str) or model_args is None
                else dict(model_args)
            )
    except ModelArgsError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None
    if judge not in (None, "local", "openai"):
        raise UsageError(f"--judge {judge!r}: use 'local' or 'openai'")
    if scoring not in ("auto", "generate", "loglikelihood"):
        raise UsageError(f"--scoring {scoring!r}: use auto, generate or loglikelihood")
    if batch_size != "auto" and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
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
    if given is None:
        cls = get_adapter(model)  # AdapterError: unknown model
        checked_args = check_model_args(cls, model, raw_args)  # ModelArgsError (a usage error)
    else:
        checked_args = raw_args
    _check_no_collision(output_path, cache, dataset, robustness_dataset)
    check_paths(None if output_path is None else str(output_path), cache)
    log.info(
        "tasks %s; conditions %s; dataset %s", [t.task for t in task_list], [c.name for c in conds], dataset
    )
    data = _open_data(str(dataset), task_list, seed)
    data2 = None
    if robustness_dataset is not None:
        if not str(robustness_dataset).strip():
            raise UsageError("--robustness_dataset: give a dataset folder or Hub repo id")
        data2 = _open_data(str(robustness_dataset), task_list, seed)
        same_path = os.path.realpath(os.path.expanduser(str(robustness_dataset))) == os.path.realpath(
            os.path.expanduser(str(dataset))
        )
        ids = (data.identity or {}).get("sha256"), (data2.identity or {}).get("sha256")
        if same_path or (ids[0] is not None and ids[0] == ids[1]):
            raise UsageError(
                f"--robustness_dataset {robustness_dataset}: the same data as --dataset {dataset} (dataset "
                "identity equal); give the second realization "
                "(`python -m casu_dataset build --realization 2`)"
            )
    if given is not None:
        adapter = given
        if not isinstance(template_choice, str):
            adapter.chat_template_name = None  # a name chosen by an earlier call does not carry over
    else:
        try:
            adapter = make_adapter(model, checked_args)
        except ModelArgsError:
            raise
        except ValueError as err:  # the adapter refused its arguments while loading
            raise AdapterError(str(err)) from None
    name = adapter.name if given is not None else model
    log.info("model %s (%s), fingerprint %s", name, checked_args, adapter.fingerprint)
    try:  # a NAME is checked against the processor's templates (no weights are loaded)
        template = adapter.set_chat_template(template_choice)
    except ValueError as err:
        raise UsageError(str(err)) from None
    backend = make_judge(judge)
    cache_obj = _open_cache(cache, output_path, on_cleaned)
    opts = EvalOptions(
        conditions=conds,
        batch_size=batch_n,
        shrink_on_oom=shrink,
        limit=limit,
        scene_hint=scene_hint,
        scoring=scoring,
        circular=circular,
        seed=seed,
        probe=probe,
        judge=LLMJudge(backend) if backend else None,
        event_matcher=JudgeEventMatcher(backend) if backend else None,
        bert_model=bert_model,
        progress=progress,
        system_instruction=system,
        predict_only=predict_only,
    )
    token = M.BOOTSTRAP_ITERS.set(M.BOOTSTRAP if bootstrap_iters is None else bootstrap_iters)
    ev2 = None
    try:
        if data2 is not None:  # the second realization first: its records feed recording_consistency
            import dataclasses

            log.info("evaluating the second realization %s", robustness_dataset)
            ev2 = evaluate(adapter, task_list, data2, dataclasses.replace(opts, probe=False), cache_obj)
            opts.robustness = {}
            for t, recs in ev2["samples"].items():
                for r in recs:
                    opts.robustness.setdefault((t, r["condition"]), []).append(r)
        ev = evaluate(adapter, task_list, data, opts, cache_obj)
    finally:
        M.BOOTSTRAP_ITERS.reset(token)
    if ev2 is not None:
        _check_paired(ev, ev2, dataset, robustness_dataset)
    ended = time.time()
    if write_out:
        for t, recs in ev["samples"].items():
            if recs:
                print(
                    f"--- {t}: first prompt ({recs[0]['id']}, {recs[0]['condition']}) "
                    f"---\n{recs[0]['prompt']}"
                )
    dist = distributed_state()
    info = {
        "name": name,
        "args": checked_args,
        "info": adapter.info(),
        "fingerprint": adapter.fingerprint,
        "meta": adapter.model_meta(),
        "tokenizer": adapter.tokenizer_info(),
        "chat_template": adapter.chat_template_text(),
    }
    config = run_config(
        task_list,
        conds,
        scene_hint=scene_hint,
        scoring=scoring,
        circular=circular,
        batch_size=batch_size,
        limit=limit,
        seed=seed,
        judge_fp=backend.fingerprint if backend else None,
        gen_kwargs=gen_kw,
        hf_hub_log_args=log_args,
        system_instruction=system,
        chat_template=template,
    )
    config.update(
        bootstrap_iters=M.BOOTSTRAP if bootstrap_iters is None else bootstrap_iters,
        use_cache=cache
        if cache not in (None, "off")
        else (
            os.path.join(str(output_path), "cache.sqlite")
            if output_path is not None and cache is None
            else None
        ),
        predict_only=bool(predict_only),
        fewshot_random_seed=fewshot_random_seed,
    )
    if ev2 is not None:
        config["robustness_dataset"] = str(robustness_dataset)
    doc = document(ev, info, config, {"path": str(dataset)}, run_times={"start": started, "end": ended})
    if ev2 is not None:
        doc["robustness"] = robustness_block(ev, ev2, str(dataset), str(robustness_dataset), seed)
        if ev2["errors"]:  # failed on the second realization: the run has errors too (exit 4, rerun)
            doc["errors"] = doc["errors"] + [dict(e, dataset="realization2") for e in ev2["errors"]]
            doc["n_errors"], doc["status"] = len(doc["errors"]), "errors"
    res = Results(
        doc, ev["samples"], main_process=dist is None or dist.is_main_process, log_samples=log_samples
    )
    tracker = getattr(evaluation_tracker, "general_config_tracker", None)
    if tracker is not None and hasattr(tracker, "log_experiment_args"):  # as lm-eval's simple_evaluate does
        tracker.log_experiment_args(
            model_source=name,
            model_args=res["config"]["model_args"],
            system_instruction=system,
            chat_template=res["chat_template"],
            fewshot_as_multiturn=bool(fewshot_as_multiturn),
        )
    if output_path is not None and res.main_process:
        res.path = write_outputs(doc, ev["samples"] if log_samples else None, Path(output_path))
        res["casu"]["document"] = res.path.name
        log.info("wrote %s", res.path)
        res.pushed = push.push_after_run(res.path, log_args, token=os.environ.get("HF_TOKEN"))  # never raises
    return res


def _check_paired(ev: dict, ev2: dict, dataset, robustness_dataset) -> None:
    """Refuse a second realization whose questions are not the first one's (by row id)."""
    if ev["dataset_fingerprint"] == ev2["dataset_fingerprint"]:
        raise UsageError(
            f"--robustness_dataset {robustness_dataset}: the same bytes as --dataset {dataset}; give the "
            "second realization (`python -m casu_dataset build --realization 2`)"
        )
    ids1 = {r["id"] for recs in ev["samples"].values() for r in recs}
    ids2 = {r["id"] for recs in ev2["samples"].values() for r in recs}
    if ids1 and not ids1 & ids2:
        raise UsageError(
            f"--robustness_dataset {robustness_dataset}: none of its question ids is in --dataset {dataset}: "
            "not a realization of the same dataset"
        )


def robustness_block(ev: dict, ev2: dict, dataset: str, robustness_dataset: str, seed: int = 0) -> dict:
    """The results document's `robustness`: both datasets, the second realization's results and
    recording_consistency over all multiple-choice tasks together, per condition (a family counts
    as the same only if every question of every task it has is)."""
    from harness import metrics as M

    overall: dict[str, dict] = {}
    conds = list(dict.fromkeys(r["condition"] for recs in ev["samples"].values() for r in recs))
    for c in conds:
        a = [r for recs in ev["samples"].values() for r in recs if r["condition"] == c and r.get("options")]
        b = [r for recs in ev2["samples"].values() for r in recs if r["condition"] == c and r.get("options")]
        v = M.recording_consistency(a, b, seed=seed)
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
            "fingerprint": ev2["dataset_fingerprint"],
            "identity": ev2.get("dataset_identity"),
            "results": ev2["results"],
            "evaluated": ev2["evaluated"],
            "n_errors": len(ev2["errors"]),
            "errors": ev2["errors"],
        },
        "overall": overall,
    }


def _open_cache(cache: str | None, output_path, on_cleaned):
    import sqlite3

    from casu_dataset.core.llm.cache import ResponseCache
    from harness.outputs import clean_stale

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
        from casu_dataset.core.errors import ResourceError, resource_message

        full = resource_message(err, f"--cache {path}")
        if full:
            raise ResourceError(f"--cache {path}: {full}") from None
        raise UsageError(
            f"--cache {path}: cannot open it as the response cache ({err}); give a new file name or 'off'"
        ) from None
