"""What a run is asked to do: `EvalConfig`, every setting of `simple_evaluate` and of `python -m
harness`, checked in one place before anything loads, and the parsers of lm-eval's flag values
(--gen_kwargs, --limit, --batch_size auto, --hf_hub_log_args, --device, ...). Each check raises
`UsageError` naming the flag and the value (the CLI's exit 2).

A leaf module: it imports nothing else from the harness, so every stage can read the config."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from casu_dataset.core.errors import CasuError


class UsageError(CasuError, ValueError):
    """A bad argument or path; the message names the flag (the CLI's exit code 2)."""


# --batch_size auto: on CPU (or an API adapter) there is no memory to probe, so a fixed size;
# 8 keeps a batch's audio small and amortises the per-call overhead. On CUDA the run starts at
# AUTO_CUDA_START and halves on out-of-memory (runner.process) until a batch fits.
AUTO_CPU_BATCH = 8
AUTO_CUDA_START = 64

GEN_KEYS = ("max_new_tokens", "do_sample", "temperature")  # the task YAML's `generation` fields
# lm-eval's --gen_kwargs keys beyond those (max_gen_toks is max_new_tokens under lm-eval's name)
LMEVAL_GEN_KEYS = ("until", "max_gen_toks", "top_p", "top_k")

#: The most values a --config YAML may expand to, aliases included (an alias bomb is refused).
YAML_NODES = 100_000

# lm-eval's --hf_hub_log_args keys (EvaluationTracker) and their types
HUB_LOG_ARGS = {
    "hub_results_org": str,
    "hub_repo_name": str,
    "results_repo_name": str,
    "details_repo_name": str,
    "push_results_to_hub": bool,
    "push_samples_to_hub": bool,
    "public_repo": bool,
    "leaderboard_url": str,
    "point_of_contact": str,
    "gated": bool,
}


def _pairs(text: str, flag: str) -> dict[str, str]:
    from model_adapters.base import parse_pairs

    return parse_pairs(text, flag)


def lmeval_value(text: str):
    """A `k=v` value typed as lm-eval 0.4.13's CLI types it (`_cli/utils.handle_cli_value_string`):
    true/false, digits -> int, a float, then a Python literal (`["\\n"]` -> a list with a newline),
    else the text as it is."""
    if text.lower() == "true":
        return True
    if text.lower() == "false":
        return False
    if text.isnumeric():
        return int(text)
    try:
        return float(text)
    except ValueError:
        pass
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def split_top_level(text: str) -> list[str]:
    """lm-eval's `split_top_level`: split on the commas outside brackets, braces and quotes."""
    parts: list[str] = []
    buf: list[str] = []
    depth = 0
    quote: str | None = None
    for char in text:
        if quote is not None:
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char in "[({":
            depth += 1
        elif char in "])}":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(char)
    parts.append("".join(buf))
    return [x for x in parts if x]


def parse_kwargs_string(text: str, flag: str) -> dict:
    """lm-eval's `--gen_kwargs` value (`_cli/utils.MergeDictAction`): a JSON object, or `k=v,...` split
    on the commas outside brackets and quotes, each value typed by `lmeval_value`."""
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        if "{" in text:
            raise ValueError(
                f"{flag} {text!r}: not valid JSON (use double quotes for JSON strings)"
            ) from None
    else:
        if isinstance(value, dict):
            return value
    out: dict[str, Any] = {}
    for item in split_top_level(text):
        if "=" not in item:
            raise ValueError(f"{flag} {item!r}: expected key=value")
        k, v = item.split("=", 1)
        out[k] = lmeval_value(v)
    return out


def parse_gen_kwargs(text: str | dict | list | tuple | None) -> dict:
    """`max_gen_toks=16,until=["\\n"],temperature=0` (or lm-eval's space-separated `k=v` words, or a
    JSON object, or a dict) -> the settings, typed as lm-eval types them (checked by
    apply_gen_kwargs)."""
    if isinstance(text, dict):
        kw: dict[str, Any] = dict(text)
    else:
        kw = {}
        for part in [text] if isinstance(text, str) or text is None else list(text):
            kw.update(parse_kwargs_string(str(part or ""), "--gen_kwargs"))
    unknown = sorted(set(kw) - set(GEN_KEYS) - set(LMEVAL_GEN_KEYS))
    if unknown:
        raise ValueError(
            f"--gen_kwargs {unknown[0]}: not a generation setting; use "
            f"{', '.join(GEN_KEYS + LMEVAL_GEN_KEYS)}"
        )
    if "max_gen_toks" in kw:
        if "max_new_tokens" in kw and kw["max_new_tokens"] != kw["max_gen_toks"]:
            raise ValueError("--gen_kwargs max_gen_toks and max_new_tokens: the same setting; give one")
        kw["max_new_tokens"] = kw.pop("max_gen_toks")
    if isinstance(kw.get("until"), str):  # one stop string (lm-eval: a string or a list)
        kw["until"] = [kw["until"]]
    return kw


def parse_limit(v) -> int | float | None:
    """An integer >= 1 (samples per task) or a fraction in (0, 1) of each task."""
    if v is None:
        return None
    text = v if isinstance(v, str) else None
    if text is not None:
        try:
            v = int(text)
        except ValueError:
            try:
                v = float(text)
            except ValueError:
                raise ValueError(
                    f"--limit {text!r}: not a number; give an integer >= 1 or a fraction in (0, 1)"
                ) from None
    shown = repr(text) if text is not None else repr(v)
    bad = ValueError(f"--limit {shown}: must be an integer >= 1 or a fraction in (0, 1)")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad
    if isinstance(v, float):
        if 0 < v < 1:
            return v
        if v.is_integer() and v >= 1:
            return int(v)
        raise bad
    if v < 1:
        raise bad
    return v


def limit_count(limit: int | float, rows: int) -> int:
    """Samples to take from a task of `rows` rows (a fraction rounds up, as lm-eval's)."""
    return int(math.ceil(limit * rows)) if isinstance(limit, float) else int(limit)


def parse_hub_log_args(text: str | dict | None) -> dict:
    """lm-eval's `--hf_hub_log_args k=v,...`, typed; unknown keys and bad booleans are named."""
    raw = dict(text) if isinstance(text, dict) else _pairs(text or "", "--hf_hub_log_args")
    out = {}
    for k, v in raw.items():
        if k not in HUB_LOG_ARGS:
            raise ValueError(f"--hf_hub_log_args {k}: unknown key; use {', '.join(HUB_LOG_ARGS)}")
        if HUB_LOG_ARGS[k] is bool and not isinstance(v, bool):
            if str(v).lower() not in ("true", "false"):
                raise ValueError(f"--hf_hub_log_args {k}={v!r}: must be true or false")
            v = str(v).lower() == "true"
        out[k] = v
    if "hub_results_org" in out or "results_repo_name" in out:
        from casu_dataset.core import hub

        try:
            hub.check_repo_id(results_repo(out) or "", "--hf_hub_log_args")
        except hub.HubError as err:
            raise ValueError(str(err)) from None
    return out


def parse_wandb_args(text: str | dict | None) -> dict | None:
    """lm-eval's `--wandb_args project=P,name=N,...`: wandb.init's keywords (true/false typed); None
    when not given."""
    if text is None or text == "" or text == {}:
        return None
    raw = dict(text) if isinstance(text, dict) else _pairs(text, "--wandb_args")
    return {
        k: (v.lower() == "true" if isinstance(v, str) and v.lower() in ("true", "false") else v)
        for k, v in raw.items()
    }


def results_repo(log_args: dict) -> str | None:
    """ORG/NAME of the results dataset named by --hf_hub_log_args (lm-eval's default name)."""
    org = log_args.get("hub_results_org")
    if not org:
        return None
    return f"{org}/{log_args.get('results_repo_name') or log_args.get('hub_repo_name') or 'casu-results'}"


def check_device(device: str | None) -> None:
    """--device cuda[:N] must name a visible GPU; checked before the dataset or model loads."""
    if not device or device == "cpu":
        return
    import re

    m = re.fullmatch(r"cuda(?::(\d+))?|mps|auto", device)
    if not m:
        raise ValueError(f"--device {device!r}: use cpu, cuda, cuda:N, mps or auto")
    if device == "auto":
        return
    import torch

    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError("--device mps: MPS is not available on this machine; use --device cpu")
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {device}: CUDA is not available (torch {torch.__version__}, "
            f"{'CPU-only build' if torch.version.cuda is None else 'no visible GPU'}); use --device cpu"
        )
    if m.group(1) is not None and int(m.group(1)) >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible")


AUTO_BATCH = re.compile(r"auto(?::([1-9][0-9]*))?")


def is_auto(batch_size) -> bool:
    """`auto` or lm-eval's `auto:N` (N re-detections; CASU's auto halves on out-of-memory as it
    goes, so N is recorded and changes nothing)."""
    return isinstance(batch_size, str) and AUTO_BATCH.fullmatch(batch_size) is not None


def resolve_batch_size(batch_size, device: str | None, max_batch_size: int | None = None) -> tuple[int, bool]:
    """(starting batch size, shrink on out-of-memory) for a checked --batch_size (an EvalConfig's:
    an int >= 1, 'auto' or 'auto:N'); an automatic size is at most `max_batch_size` (lm-eval's
    --max_batch_size)."""
    if is_auto(batch_size):
        start, shrink = (
            (AUTO_CUDA_START, True) if device and device.startswith("cuda") else (AUTO_CPU_BATCH, False)
        )
        return (min(start, max_batch_size) if max_batch_size else start), shrink
    return batch_size, False


# -- prompts: --system_instruction, --apply_chat_template, --num_fewshot, --fewshot_as_multiturn ---------

ZERO_SHOT_WHY = (
    "CASU tasks are zero-shot: every question belongs to a contrast family whose variants share the "
    "question and options, so shots drawn from the same set would give away keys"
)


def parse_system_instruction(text) -> str | None:
    """lm-eval's --system_instruction: the system turn of every request (None: not given)."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"--system_instruction: must be text, got {type(text).__name__}")
    if not text.strip():
        raise ValueError(
            "--system_instruction: empty text; leave the flag out (to drop an audio LM's own default "
            "system prompt, use --model_args system_prompt=)"
        )
    return text


def parse_chat_template(value) -> bool | str | None:
    """lm-eval's --apply_chat_template [NAME]: None/False (not given), True (the default template) or a
    name."""
    if value is None or isinstance(value, bool):
        return value or None
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise ValueError(
        f"--apply_chat_template {value!r}: give no value (the model's default template) or a template name"
    )


def check_fewshot(num_fewshot, fewshot_as_multiturn) -> int:
    """--num_fewshot must be 0 (or absent); --fewshot_as_multiturn needs shots, so it is refused."""
    if num_fewshot is not None:
        if isinstance(num_fewshot, bool) or not isinstance(num_fewshot, int) or num_fewshot < 0:
            raise ValueError(f"--num_fewshot: must be an integer >= 0, got {num_fewshot!r}")
        if num_fewshot > 0:
            raise ValueError(f"--num_fewshot {num_fewshot}: {ZERO_SHOT_WHY}; use 0 or leave it out")
    if fewshot_as_multiturn:
        raise ValueError(
            f"--fewshot_as_multiturn: needs few-shot examples (--num_fewshot > 0), and {ZERO_SHOT_WHY}; "
            "drop the flag"
        )
    return 0


CACHE_REQUESTS = ("true", "refresh", "delete")
SAMPLES_WHY = (
    "--samples: not supported: CASU scores a contrast family as a whole (family accuracy needs all "
    "four variants of a question), so rows are not picked one by one; use --limit N (the first N "
    "rows, whole families only) or --tasks to choose what runs"
)
# lm-eval's default is 100,000; ten times that still fits in memory for every CASU task.
MAX_BOOTSTRAP_ITERS = 1_000_000
VERBOSITY = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
JUDGES = ("local", "openai")
SCORING = ("auto", "generate", "loglikelihood")
# lm-eval's seeds: python's random, numpy, torch and the few-shot sampler, its default, and the
# keywords of its simple_evaluate
SEED_ALIASES = ("random_seed", "numpy_random_seed", "torch_random_seed", "fewshot_random_seed")
DEFAULT_SEED = (0, 1234, 1234, 1234)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_seed(value) -> list[int | None]:
    """lm-eval's --seed (`_cli/utils._int_or_none_list_arg_type(3, 4, "0,1234,1234,1234")`): one value
    for all four seeds, or python,numpy,torch[,fewshot] (a missing few-shot seed is 1234), each an
    integer >= 0 or None (that generator is not seeded)."""
    if isinstance(value, str):
        items: list = [x.strip() for x in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    out: list[int | None] = []
    for x in items:
        if x is None or (isinstance(x, str) and x.lower() == "none"):
            out.append(None)
            continue
        if isinstance(x, str) and x.lstrip("+-").isdigit():
            x = int(x)
        if not _is_int(x) or x < 0:
            raise UsageError(f"--seed {value!r}: {x!r} is not an integer >= 0 or None")
        out.append(x)
    if len(out) == 1:
        return out * len(DEFAULT_SEED)
    if len(out) == len(DEFAULT_SEED) - 1:
        return [*out, DEFAULT_SEED[-1]]
    if len(out) != len(DEFAULT_SEED):
        raise UsageError(
            f"--seed {value!r}: one value, or 4 (python random, numpy, torch, few-shot; at most four; "
            "3 leaves the few-shot seed at 1234), each an integer or None"
        )
    return out


def _seed(kw: dict) -> None:
    """The seeds of a run, in place: `seed` (CASU's: masking noise, bootstrap, the random baseline,
    cache keys) is python random's seed (lm-eval's `random_seed`; None: python's random is not
    seeded and CASU's seed is 0); `numpy_random_seed`, `torch_random_seed`, `fewshot_random_seed`
    as lm-eval's (default 1234, None: not seeded). A list or "a,b,c,d" for `seed` is lm-eval's
    --seed form."""
    seed = kw.get("seed")
    if seed is not None and not _is_int(seed):  # lm-eval's list form
        values = parse_seed(seed)
        for name, v in zip(SEED_ALIASES, values):
            if name in kw and kw[name] != v:
                raise UsageError(f"{name}={kw[name]!r} and seed={seed!r}: give one")
            kw[name] = v
        seed = None
    if "random_seed" in kw:
        random_seed = kw["random_seed"]
        if seed is not None and random_seed is not None and seed != random_seed:
            raise UsageError(
                f"random_seed={random_seed!r} and seed={seed!r}: give one (they are the same seed)"
            )
        if random_seed is not None:
            seed = random_seed
    else:
        kw["random_seed"] = seed if seed is not None else DEFAULT_SEED[0]
    kw["seed"] = DEFAULT_SEED[0] if seed is None else seed
    if not _is_int(kw["seed"]) or kw["seed"] < 0:
        raise UsageError(f"--seed: must be an integer >= 0, got {kw['seed']!r}")
    for name, default in zip(SEED_ALIASES, DEFAULT_SEED):
        v = kw.setdefault(name, default)
        if v is not None and (not _is_int(v) or v < 0):
            raise UsageError(f"{name}={v!r}: an integer >= 0 or None (not seeded)")


def apply_seeds(config) -> str:
    """Seed python's random, numpy and torch as lm-eval's simple_evaluate does (a None seed leaves
    its generator alone); the few-shot seed is recorded (CASU tasks are zero-shot). Returns the
    log line lm-eval prints."""
    said = []
    if config.random_seed is not None:
        import random

        random.seed(config.random_seed)
        said.append(f"Setting random seed to {config.random_seed}")
    if config.numpy_random_seed is not None:
        import numpy as np

        np.random.seed(config.numpy_random_seed)
        said.append(f"Setting numpy seed to {config.numpy_random_seed}")
    if config.torch_random_seed is not None:
        import importlib.util

        if importlib.util.find_spec("torch") is not None:
            import torch

            torch.manual_seed(config.torch_random_seed)
            said.append(f"Setting torch manual seed to {config.torch_random_seed}")
    if config.fewshot_random_seed is not None:
        said.append(f"Setting fewshot manual seed to {config.fewshot_random_seed}")
    return " | ".join(said)


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
    if bootstrap is not None and (not _is_int(bootstrap) or not 0 <= bootstrap <= MAX_BOOTSTRAP_ITERS):
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
    _seed(kw)
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
    if not is_auto(batch_size) and (not _is_int(batch_size) or batch_size < 1):
        raise UsageError(f"--batch_size: must be an integer >= 1, 'auto' or 'auto:N', got {batch_size!r}")
    max_batch = kw.get("max_batch_size")
    if max_batch is not None and (not _is_int(max_batch) or max_batch < 1):
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
    from casu_dataset.core.paths import PathProblem, read_text

    p = Path(path)
    if not os.path.lexists(p):
        raise UsageError(f"--config {path}: no such file")
    if p.is_dir():
        raise UsageError(f"--config {path}: is a folder; give a YAML file")
    try:
        data = strict_yaml.safe_load(read_text(p, f"--config {path}"), p, max_nodes=YAML_NODES)
    except PathProblem as err:  # a FIFO, a device (/dev/zero), a symlink loop, over 1 MiB
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
