"""What a run is asked to do: `EvalConfig`, every setting of `simple_evaluate` and of `python -m
harness`, checked in one place before anything loads (UsageError names the flag and the value:
the CLI's exit 2), and how the run was launched (`world_size`). The parsers of single flag values
are in `harness.flag_values`; their public names are re-exported here, where callers have long
imported them.

Imports nothing from the harness but `harness.flag_values` (a leaf), so every stage can read the
config."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.flag_values import (
    AUTO_CPU_BATCH,
    AUTO_CUDA_START,
    CACHE_REQUESTS,
    JUDGES,
    MAX_BOOTSTRAP_ITERS,
    SAMPLES_WHY,
    SCORING,
    SEED_ALIASES,
    VERBOSITY,
    YAML_NODES,
    UsageError,
    apply_seeds,
    check_device,
    check_fewshot,
    check_seeds,
    is_auto,
    is_int,
    limit_count,
    parse_chat_template,
    parse_gen_kwargs,
    parse_hub_log_args,
    parse_limit,
    parse_seed,
    parse_system_instruction,
    parse_wandb_args,
    resolve_batch_size,
    results_repo,
)

# Besides its own names, the flag parsers that callers import from here (harness.flag_values).
__all__ = [
    "AUTO_CPU_BATCH",
    "AUTO_CUDA_START",
    "CLI_ONLY",
    "EvalConfig",
    "UsageError",
    "VERBOSITY",
    "apply_seeds",
    "check_device",
    "config_keys",
    "is_auto",
    "limit_count",
    "parse_gen_kwargs",
    "parse_limit",
    "parse_seed",
    "read_yaml",
    "resolve_batch_size",
    "results_repo",
    "world_size",
]


def _checked(kw: dict) -> dict:
    """The keywords of a run, checked and in their one form (UsageError names the flag)."""
    kw = dict(kw)
    verbosity = kw.get("verbosity")
    if verbosity is not None:
        if not isinstance(verbosity, str) or verbosity.upper() not in VERBOSITY:
            raise UsageError(f"--verbosity {verbosity!r}: one of DEBUG, INFO, WARNING, ERROR")
        kw["verbosity"] = verbosity.upper()
    model = kw.get("model")
    if model is not None and not isinstance(model, str) and not _is_adapter(model):
        raise UsageError(
            f"model={type(model).__name__}: give an adapter name (see `python -m harness list`), "
            "module:Class, or a model_adapters.Adapter instance"
        )
    if (
        model is not None
        and _is_adapter(model)
        and (kw.get("model_args") not in (None, "", {}) or kw.get("device") is not None)
    ):
        raise UsageError(
            f"model_args/device with an adapter instance ({model.name}): it is already built with "
            f"{model.model_args}; give a name and model_args instead, or leave them out"
        )
    bootstrap = kw.get("bootstrap_iters")
    if bootstrap is not None and (not is_int(bootstrap) or not 0 <= bootstrap <= MAX_BOOTSTRAP_ITERS):
        raise UsageError(
            f"bootstrap_iters={bootstrap!r}: an integer in 0..{MAX_BOOTSTRAP_ITERS:,} (0: no "
            "intervals; each interval draws this many resamples of every task's samples, so 1e9 would "
            "need tens of GB)"
        )
    use_cache = kw.pop("use_cache", None)
    if use_cache is not None:
        cache = kw.get("cache")
        if cache is not None and cache != use_cache:
            raise UsageError(
                f"use_cache={use_cache!r} and cache={cache!r}: give one (the response cache file)"
            )
        kw["cache"] = str(use_cache)
    if kw.get("predict_only"):
        kw["log_samples"] = True
    check_seeds(kw)
    try:
        kw["gen_kwargs"] = parse_gen_kwargs(kw.get("gen_kwargs"))
        kw["limit"] = parse_limit(kw.get("limit"))
        kw["hf_hub_log_args"] = parse_hub_log_args(kw.get("hf_hub_log_args"))
        kw["wandb_args"] = parse_wandb_args(kw.get("wandb_args"))
        kw["system_instruction"] = parse_system_instruction(kw.get("system_instruction"))
        kw["apply_chat_template"] = parse_chat_template(kw.get("apply_chat_template"))
        check_fewshot(kw.get("num_fewshot"), kw.get("fewshot_as_multiturn", False))
    except UsageError:
        raise
    except ValueError as err:
        raise UsageError(str(err)) from None
    judge = kw.get("judge")
    if judge not in (None, *JUDGES):
        raise UsageError(f"--judge {judge!r}: use 'local' or 'openai'")
    scoring = kw.get("scoring", "auto")
    if scoring not in SCORING:
        raise UsageError(f"--scoring {scoring!r}: use auto, generate or loglikelihood")
    batch_size = kw.get("batch_size", 1)
    if not is_auto(batch_size) and (not is_int(batch_size) or batch_size < 1):
        raise UsageError(f"--batch_size: must be an integer >= 1, 'auto' or 'auto:N', got {batch_size!r}")
    max_batch = kw.get("max_batch_size")
    if max_batch is not None and (not is_int(max_batch) or max_batch < 1):
        raise UsageError(f"--max_batch_size: must be an integer >= 1, got {max_batch!r}")
    if kw.get("cache_requests") not in (None, *CACHE_REQUESTS):
        raise UsageError(
            f"--cache_requests {kw['cache_requests']!r}: one of true (use the response cache), refresh "
            "(ask the model again and overwrite the cached answers), delete (remove the cache file first)"
        )
    if kw.pop("samples", None) is not None:  # lm-eval's keyword: refused, with the reason
        raise UsageError(SAMPLES_WHY)
    for key in ("output_path", "dataset", "robustness_dataset"):
        if isinstance(kw.get(key), Path):
            kw[key] = str(kw[key])
    if kw.get("robustness_dataset") is not None and not str(kw["robustness_dataset"]).strip():
        raise UsageError("--robustness_dataset: give a dataset folder or Hub repo id")
    if isinstance(kw.get("tasks"), tuple):  # "a,b", ["a", "b"] and ("a", "b") are the same selection
        kw["tasks"] = list(kw["tasks"])
    tasks = kw.get("tasks")
    if isinstance(tasks, list):
        for i, t in enumerate(tasks):
            if not isinstance(t, str) and not (isinstance(t, BaseModel) and hasattr(t, "doc_to_text")):
                raise UsageError(
                    f"--tasks: item {i + 1} is {_shown(t)}; give task names (a list of names, or "
                    "`a,b`) or TaskConfig objects"
                )
    elif tasks is not None and not isinstance(tasks, str):
        raise UsageError(f"--tasks: {_shown(tasks)}; give a task name, `a,b`, or a list of names")
    conditions = kw.get("conditions")
    if isinstance(conditions, (list, tuple)):  # names or run.conditions.Condition objects
        for c in conditions:
            if not isinstance(c, str) and not isinstance(getattr(c, "name", None), str):
                raise UsageError(
                    f"--conditions: {_shown(c)} is not a condition name (full, all, PEB, P__, ...)"
                )
        kw["conditions"] = ",".join(str(getattr(c, "name", c)) for c in conditions)
    if isinstance(kw.get("include_path"), (str, Path)):
        kw["include_path"] = [kw["include_path"]]
    for i, d in enumerate(kw.get("include_path") or []):
        if not isinstance(d, (str, Path)):
            raise UsageError(f"--include_path: item {i + 1} is {_shown(d)}; give folder paths")
    return kw


def _shown(value) -> str:
    """A bad value in an error line: its type and the start of it."""
    text = " ".join(repr(value).split())
    return f"a {type(value).__name__} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _is_adapter(model) -> bool:
    from model_adapters.base import Adapter

    return isinstance(model, Adapter)


class EvalConfig(BaseModel):
    """Every setting of one evaluation, checked and frozen: what `simple_evaluate` runs and the CLI
    builds (`EvalConfig.from_cli`), also from keywords or a YAML file (`EvalConfig.from_yaml`,
    `python -m harness --config run.yaml`). A bad value raises `UsageError` naming the flag.

    lm-eval's keywords are accepted and folded in: `random_seed` (= `seed`), `numpy_random_seed`,
    `torch_random_seed`, `fewshot_random_seed` (lm-eval's defaults 1234; `seed` may also be lm-eval's
    list), `use_cache` (= `cache`); `predict_only` implies `log_samples`. `replace(**changes)` gives a
    checked copy."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    model: Any = Field(None, description="an adapter name, module:Class, or a model_adapters.Adapter")
    model_args: str | dict | None = None
    tasks: str | list = "all"
    # a built folder or a Hub repo; None: the one the tasks' dataset_path names, else casu_mini
    dataset: str | None = None
    robustness_dataset: str | None = None
    conditions: str = "full"  # full, all, or names such as PEB,P__,_E_
    limit: int | float | None = None
    output_path: str | None = None
    log_samples: bool = False
    include_path: list[str | Path] | None = None
    batch_size: int | str = 1  # an integer, "auto" or lm-eval's "auto:N"
    max_batch_size: int | None = None  # lm-eval's: the largest automatic batch size
    seed: int = 0  # CASU's seed (noise, bootstrap, random baseline, cache keys) = python random's
    random_seed: int | None = 0  # lm-eval's python random seed (None: not seeded; seed stays 0)
    numpy_random_seed: int | None = 1234  # lm-eval's: numpy's global seed (None: not seeded)
    torch_random_seed: int | None = 1234  # lm-eval's: torch.manual_seed (None: not seeded)
    scene_hint: bool = False
    scoring: Literal["auto", "generate", "loglikelihood"] = "auto"
    circular: bool = False
    judge: Literal["local", "openai"] | None = None
    bert_model: str | None = None
    cache: str | None = None
    probe: bool = True
    probe_n: int = Field(3, ge=1, description="questions the audio probe asks")
    device: str | None = None
    progress: bool = False
    gen_kwargs: dict = Field(default_factory=dict)
    hf_hub_log_args: dict = Field(default_factory=dict)
    system_instruction: str | None = None
    apply_chat_template: bool | str | None = None
    num_fewshot: int | None = None
    fewshot_as_multiturn: bool = False
    fewshot_random_seed: int | None = 1234  # lm-eval's; recorded (CASU tasks are zero-shot)
    bootstrap_iters: int | None = None
    predict_only: bool = False
    write_out: bool = False
    verbosity: str | None = None
    # lm-eval's --cache_requests: true (the response cache, as without it), refresh (ask the model
    # again and overwrite its cached answers), delete (remove the cache file before the run)
    cache_requests: str | None = None
    check_integrity: bool = False  # every file of a --dataset folder checked against its build record
    trust_remote_code: bool = False  # passed to the adapter's trust_remote_code (refused if it has none)
    strict: bool = False  # a task with more than half of its answers unparsed fails the run (exit 7)
    wandb_args: dict | None = None  # lm-eval's: wandb.init keywords; the finished run is logged there

    def __init__(self, **keywords: Any) -> None:
        try:
            super().__init__(**_checked(keywords))
        except ValidationError as err:
            raise UsageError(_describe(err)) from None

    def replace(self, **changes: Any) -> EvalConfig:
        """A checked copy with `changes` (keywords as the constructor's; a new `seed` is a new
        `random_seed` too, and the other way round)."""
        base = self.keywords()
        for a, b in (("seed", "random_seed"), ("random_seed", "seed")):
            if a in changes and b not in changes:
                base.pop(b)
        return type(self)(**{**base, **changes})

    def keywords(self) -> dict:
        """The fields as keywords (EvalConfig(**c.keywords()) == c)."""
        return {name: getattr(self, name) for name in type(self).model_fields}

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> EvalConfig:
        """A run described in a YAML file: a mapping of these fields (or the CLI's flag names, e.g.
        `no_probe: true`); `overrides` win over the file."""
        values = read_yaml(path)
        for flag, field in CLI_ONLY.items():  # `no_probe: true` is `probe: false`
            if flag in values:
                values[field] = not values.pop(flag)
        return cls(**{**values, **overrides})

    @classmethod
    def from_cli(cls, args) -> EvalConfig:
        """The config of `python -m harness` (its parsed argparse namespace)."""
        names = [*(n for n in cls.model_fields if n not in CLI_ONLY.values()), "use_cache"]
        kw = {k: getattr(args, k) for k in names if hasattr(args, k)}
        kw["probe"] = not getattr(args, "no_probe", False)
        kw["progress"] = not getattr(args, "quiet", False)
        if getattr(args, "samples", None) is not None:
            kw["samples"] = args.samples  # refused with the reason (SAMPLES_WHY)
        seeds = kw.pop("seed", None)
        if seeds is not None:  # lm-eval's --seed: one value for all four, or RANDOM,NUMPY,TORCH[,FEWSHOT]
            kw.update(zip(SEED_ALIASES, parse_seed(seeds)))
        return cls(**kw)


# The flags of `python -m harness` are EvalConfig's fields under the same names (and lm-eval's
# `--use_cache`); `--no_probe` and `--quiet` are `probe` and `progress` turned off.
CLI_ONLY = {"no_probe": "probe", "quiet": "progress"}


def config_keys() -> list[str]:
    """The keys a run's YAML may have: EvalConfig's fields, lm-eval's aliases and the CLI-only flags."""
    return sorted({*EvalConfig.model_fields, *SEED_ALIASES, "use_cache", *CLI_ONLY})


def read_yaml(path: str | Path) -> dict:
    """A run's YAML file, its keys as written (fields, lm-eval's aliases, or the CLI's `no_probe`
    and `quiet`), each one checked; UsageError naming the file and the key."""
    import yaml

    from casu_dataset.core import strict_yaml
    from casu_dataset.core.paths import PathError, read_text

    p = Path(path)
    if not os.path.lexists(p):
        raise UsageError(f"--config {path}: no such file")
    if p.is_dir():
        raise UsageError(f"--config {path}: is a folder; give a YAML file")
    try:
        data = strict_yaml.safe_load(read_text(p, f"--config {path}"), p, max_nodes=YAML_NODES)
    except PathError as err:  # a FIFO, a device (/dev/zero), a symlink loop, over 1 MiB
        raise UsageError(str(err)) from None
    except UnicodeDecodeError:
        raise UsageError(f"--config {path}: not UTF-8 text; give a YAML file") from None
    except yaml.YAMLError as err:
        raise UsageError(f"--config {path}: not valid YAML ({' '.join(str(err).split())})") from None
    except RecursionError:
        raise UsageError(f"--config {path}: not valid YAML (nested too deeply)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"--config {path}: a mapping of settings (e.g. `model: random`), got {type(data).__name__}"
        )
    known = set(config_keys())
    for key in data:
        if not isinstance(key, str) or key not in known:
            raise UsageError(f"--config {path}: unknown key {key!r}; keys: {', '.join(config_keys())}")
    return dict(data)


def _describe(err: ValidationError) -> str:
    """pydantic's errors as one line naming each flag."""
    parts = []
    for e in err.errors():
        field = ".".join(str(x) for x in e["loc"]) or "config"
        if e["type"] == "extra_forbidden":
            keys = sorted({*EvalConfig.model_fields, *SEED_ALIASES, "use_cache"})
            parts.append(f"{field}: not a setting of a run; settings: {', '.join(keys)}")
        else:
            parts.append(f"--{field} {e.get('input')!r}: {e['msg']}")
    return "; ".join(dict.fromkeys(parts))


# -- the launcher's environment: torchrun / accelerate launch set these ------------------------------

LAUNCH_VARS = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
# torchrun and accelerate launch set MASTER_ADDR (and the torchelastic variables) for every process
LAUNCHER_VARS = ("MASTER_ADDR", "TORCHELASTIC_RUN_ID")


def world_size() -> int:
    """The number of processes of this run (1 without a launcher), from the launcher's environment:
    WORLD_SIZE, RANK and LOCAL_RANK must be integers (WORLD_SIZE >= 1, RANK < WORLD_SIZE); a
    WORLD_SIZE over 1 without a launcher (no MASTER_ADDR) would wait for processes that never come.
    UsageError names the variable."""
    values: dict[str, int] = {}
    for name in LAUNCH_VARS:
        text = os.environ.get(name)
        if text is None or text.strip() == "":
            continue
        t = text.strip()
        if not (t.isascii() and t.isdigit()) or len(t) > 6:
            raise UsageError(
                f"environment variable {name}={text[:40]!r}: not an integer >= 0 (torchrun and "
                "accelerate launch set it; unset it to run in one process)"
            )
        values[name] = int(t)
    size = values.get("WORLD_SIZE", 1)
    if size < 1:
        raise UsageError("environment variable WORLD_SIZE=0: the number of processes is at least 1")
    if values.get("RANK", 0) >= size:
        raise UsageError(
            f"environment variable RANK={values['RANK']}: outside WORLD_SIZE={size} (ranks 0..{size - 1})"
        )
    if size > 1 and not any(os.environ.get(v) for v in LAUNCHER_VARS):
        raise UsageError(
            f"environment variable WORLD_SIZE={size} without a launcher (MASTER_ADDR is not set): start "
            f"the run with `torchrun --nproc_per_node {size} -m harness ...` or `accelerate launch`, or "
            "unset WORLD_SIZE to run in one process"
        )
    return size
