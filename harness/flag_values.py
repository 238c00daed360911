"""The parsers of lm-eval's flag values (--gen_kwargs, --limit, --batch_size auto, --hf_hub_log_args,
--device, --seed, ...) and `UsageError`, which each raises naming the flag and the value (the
CLI's exit 2). `harness.config` builds a run's checked `EvalConfig` from them.

A leaf module: it imports nothing else from the harness."""

from __future__ import annotations

import math
import re
from typing import Any

from casu_dataset.core.errors import InputError


class UsageError(InputError, ValueError):
    """A bad argument or path; the message names the flag."""


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
        except hub.PushError as err:
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


def is_int(v) -> bool:
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
        if not is_int(x) or x < 0:
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


def check_seeds(kw: dict) -> None:
    """The seeds of a run, in place: `seed` (CASU's: masking noise, bootstrap, the random baseline,
    cache keys) is python random's seed (lm-eval's `random_seed`; None: python's random is not
    seeded and CASU's seed is 0); `numpy_random_seed`, `torch_random_seed`, `fewshot_random_seed`
    as lm-eval's (default 1234, None: not seeded). A list or "a,b,c,d" for `seed` is lm-eval's
    --seed form."""
    seed = kw.get("seed")
    if seed is not None and not is_int(seed):  # lm-eval's list form
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
    if not is_int(kw["seed"]) or kw["seed"] < 0:
        raise UsageError(f"--seed: must be an integer >= 0, got {kw['seed']!r}")
    for name, default in zip(SEED_ALIASES, DEFAULT_SEED):
        v = kw.setdefault(name, default)
        if v is not None and (not is_int(v) or v < 0):
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
