"""The `config` block of the results document: what a run was asked to do, as recorded."""

from __future__ import annotations

from harness.config import world_size


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
        "world_size": world_size(),
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
