"""lm-eval-style run flags: --gen_kwargs, --limit (count or fraction), --batch_size auto,
--hf_hub_log_args, --device. Each parser raises ValueError naming the flag and the value."""

from __future__ import annotations

import math

# --batch_size auto: on CPU (or an API adapter) there is no memory to probe, so a fixed size;
# 8 keeps a batch's audio small and amortises the per-call overhead. On CUDA the run starts at
# AUTO_CUDA_START and halves on out-of-memory (runner.process) until a batch fits.
AUTO_CPU_BATCH = 8
AUTO_CUDA_START = 64

GEN_KEYS = ("max_new_tokens", "do_sample", "temperature")  # the task YAML's `generation` fields

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


def parse_gen_kwargs(text: str | dict | None) -> dict:
    """`max_new_tokens=16,do_sample=true,temperature=0.7` -> raw dict (typed by apply_gen_kwargs)."""
    kw = dict(text) if isinstance(text, dict) else _pairs(text or "", "--gen_kwargs")
    unknown = sorted(set(kw) - set(GEN_KEYS))
    if unknown:
        raise ValueError(f"--gen_kwargs {unknown[0]}: not a generation setting; use {', '.join(GEN_KEYS)}")
    return kw


def apply_gen_kwargs(tasks: list, kw: dict) -> list:
    """Each task with `kw` merged over its YAML `generation` block, validated as the YAML is."""
    if not kw:
        return tasks
    from pydantic import ValidationError

    from harness.task_config import Generation

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


def resolve_batch_size(batch_size, device: str | None) -> tuple[int, bool]:
    """(starting batch size, shrink on out-of-memory) for an int or 'auto'."""
    if batch_size == "auto":
        if device and device.startswith("cuda"):
            return AUTO_CUDA_START, True
        return AUTO_CPU_BATCH, False
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"--batch_size: must be an integer >= 1 or 'auto', got {batch_size!r}")
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
