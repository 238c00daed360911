"""`python -m harness export-tasks lmms-eval|lm-eval DIR --dataset PATH_OR_REPO`: CASU's five tasks
and the `casu` group as a task folder for the real lmms-eval or lm-eval:

    python -m harness export-tasks lmms-eval casu_lmms --dataset ./casu_mini
    python -m lmms_eval --include_path casu_lmms --tasks casu --model qwen2_audio ...
    python -m harness export-tasks lm-eval casu_lm --dataset ./casu_mini
    lm_eval --include_path casu_lm --tasks casu --model hf-audiolm-qwen ...

The YAMLs point at the dataset: a built folder by the absolute paths of its parquet files (its
build record checked first; `datasets` caches a folder by its name, files by their paths), a Hub
id by dataset_path + dataset_name. `utils.py` only imports CASU's hooks (harness/peers/), so the
prompt, the answer parser and the metrics stay CASU's own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from casu_dataset.core.errors import InputError
from harness.cli.common import EXIT_OK, EXIT_USAGE, ArgumentParser, HelpFormatter

PEERS = {"lmms-eval": "lmms_eval_tasks", "lm-eval": "lm_eval_tasks"}
HEADER = (
    "# Written by `python -m harness export-tasks {peer}` (CASU {version}); regenerate rather than edit.\n"
)


def cmd_export_tasks(argv: list[str]) -> int:
    p = ArgumentParser(
        prog="python -m harness export-tasks",
        description="write CASU's tasks as an lmms-eval or lm-eval task folder (--include_path DIR)",
        formatter_class=HelpFormatter,
    )
    p.add_argument("peer", choices=sorted(PEERS), help="the harness the folder is for")
    p.add_argument("dir", help="the folder to write (created; CASU's files in it are replaced)")
    p.add_argument("--dataset", required=True, help="a built CASU dataset folder or a Hub dataset id")
    a = p.parse_args(argv)
    skipped: list[str] = []
    try:
        written = export_tasks(a.peer, a.dir, a.dataset, skipped)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    for t in skipped:
        print(
            f"warning: --dataset {a.dataset}: config {t!r} has no rows: task {t!r} left out of the folder "
            "(datasets cannot read an empty parquet file)",
            file=sys.stderr,
        )
    out = Path(a.dir)
    run = "python -m lmms_eval" if a.peer == "lmms-eval" else "lm_eval"
    print(f"wrote {len(written)} files to {out}: {', '.join(p.name for p in written)}")
    print(f"run: {run} --include_path {out} --tasks casu --model ... (or one task: --tasks role_inference)")
    return EXIT_OK


class ExportError(InputError, ValueError):
    """A dataset or folder the task export cannot use; the message names it."""


def local_files(source: str, config: str, split: str = "test") -> list[Path]:
    """The parquet files of one config of a built folder, absolute, the build record checked first
    (no stray or missing file, every size as the build wrote it)."""
    from casu_dataset.formats.reader import BuiltDataset, LoadError

    folder = Path(source).expanduser().resolve()
    if not folder.is_dir():
        raise ExportError(f"--dataset {source}: no such folder (build one with `casu build --out DIR`)")
    try:
        ds = BuiltDataset(folder)
        ds.verify()
        return ds.files(config, split)
    except LoadError as err:
        raise ExportError(f"--dataset {err}") from None


def num_rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def dataset_block(source: str, config: str, split: str = "test") -> str:
    """The YAML lines that point a task at one config of the dataset (a folder: its parquet files by
    absolute path; a Hub id: dataset_path + dataset_name)."""
    from casu_dataset.formats.reader import is_local

    if not is_local(source):
        return f"dataset_path: {json.dumps(source)}\ndataset_name: {config}\ntest_split: {split}\n"
    lines = "".join(f"    - {json.dumps(str(f))}\n" for f in local_files(source, config, split))
    return (
        f"dataset_path: parquet\ndataset_kwargs:\n  data_files:\n    {split}:\n{lines}test_split: {split}\n"
    )


def _lmms_task(task: str, data: str, version: int, gen) -> str:
    mcq = task_kind(task) == "multiple_choice"
    metrics = (
        [
            ("acc", "accuracy", True),
            ("family_acc", "family_accuracy", True),
            ("unparsed_rate", "unparsed_rate", False),
        ]
        if mcq
        else [
            ("bleu", "bleu4", True),
            ("bertscore", "bertscore", True),
            ("event_match", "event_match", True),
            ("one_minus_wer", "one_minus_wer", True),
        ]
    )
    return (
        f"task: {task}\n{data}output_type: generate_until\n"
        "doc_to_visual: !function utils.doc_to_visual\n"
        f"doc_to_text: !function utils.{task}_doc_to_text\n"
        f"doc_to_target: {'answer' if mcq else 'reference'}\n"
        f"process_results: !function utils.{task}_process_results\n"
        "generation_kwargs:\n"
        f"  max_new_tokens: {gen.max_new_tokens}\n  do_sample: {str(gen.do_sample).lower()}\n"
        f"  temperature: {float(gen.temperature)}\n  until: []\n"
        "metric_list:\n"
        + "".join(
            f"  - metric: {m}\n    aggregation: !function utils.{fn}\n"
            f"    higher_is_better: {str(hib).lower()}\n"
            for m, fn, hib in metrics
        )
        + ("cluster_key: family_id\nscore_key: score\n" if mcq else "")
        + f"metadata:\n  version: {version}\n"
    )


def _lm_task(task: str, data: str, version: int, gen) -> str:
    mcq = task_kind(task) == "multiple_choice"
    metrics = (
        [
            ("acc", "mean", True),
            ("family_acc", "!function utils.family_accuracy", True),
            ("acc_stderr_clustered", "!function utils.accuracy_stderr_clustered", False),
            ("unparsed_rate", "!function utils.unparsed_rate", False),
        ]
        if mcq
        else [
            ("bleu", "!function utils.bleu4", True),
            ("bertscore", "!function utils.bertscore", True),
            ("event_match", "!function utils.event_match", True),
            ("one_minus_wer", "!function utils.one_minus_wer", True),
        ]
    )
    return (
        f"task: {task}\n{data}output_type: generate_until\n"
        "doc_to_audio: !function utils.doc_to_audio\n"
        f"doc_to_text: !function utils.{task}_doc_to_text\n"
        f"doc_to_target: {'answer' if mcq else 'reference'}\n"
        f"process_results: !function utils.{task}_process_results\n"
        "generation_kwargs:\n"
        f"  max_gen_toks: {gen.max_new_tokens}\n  do_sample: {str(gen.do_sample).lower()}\n"
        f"  temperature: {float(gen.temperature)}\n  until: []\n"
        "metric_list:\n"
        + "".join(
            f"  - metric: {m}\n    aggregation: {agg}\n    higher_is_better: {str(hib).lower()}\n"
            for m, agg, hib in metrics
        )
        + f"metadata:\n  version: {version}\n"
    )


def task_kind(task: str) -> str:
    from harness.peers.common import casu_task

    return casu_task(task).output_type


def utils_py(peer: str) -> str:
    from harness.peers.common import TASKS

    mod = PEERS[peer]
    hooks = ("doc_to_visual",) if peer == "lmms-eval" else ("doc_to_audio",)
    aggs = (
        ("accuracy", "family_accuracy", "unparsed_rate")
        if peer == "lmms-eval"
        else ("family_accuracy", "accuracy_stderr_clustered", "unparsed_rate")
    ) + ("bleu4", "bertscore", "event_match", "one_minus_wer")
    per_task = "".join(
        f"{t}_doc_to_text = _casu.doc_to_text_for({t!r})\n"
        f"{t}_process_results = _casu.process_results_for({t!r})\n"
        for t in TASKS
    )
    return (
        f'"""CASU\'s hooks for {peer}: everything lives in harness/peers/{mod}.py (pip install casu)."""\n\n'
        f"from harness.peers import {mod} as _casu\n\n"
        + "".join(f"{h} = _casu.{h}\n" for h in hooks + aggs)
        + "\n"
        + per_task
    )


def readme(peer: str, source: str) -> str:
    run = (
        "python -m lmms_eval --include_path THIS_FOLDER --tasks casu --model qwen2_audio "
        "--model_args pretrained=Qwen/Qwen2-Audio-7B-Instruct"
        if peer == "lmms-eval"
        else "lm_eval --include_path THIS_FOLDER --tasks casu --model hf-audiolm-qwen "
        "--model_args pretrained=Qwen/Qwen2-Audio-7B-Instruct"
    )
    return (
        f"# CASU tasks for {peer}\n\n"
        f"Written by `python -m harness export-tasks {peer} DIR --dataset {source}`.\n"
        "The five tasks (contextual_reasoning, entity_extraction, role_inference, counterfactual_reasoning,\n"
        "scene_description) and the group `casu`. CASU must be installed beside the harness (`utils.py`\n"
        "imports harness/peers/): the prompt, the answer parser and the metrics are CASU's own.\n\n"
        f"    {run}\n\n"
        "Multiple choice is generation parsed by CASU's layered parser (never a guess: an unparsed reply\n"
        "is wrong and counted in `unparsed_rate`); `family_acc` counts a contrast family right only when\n"
        + (
            "all 4 variants are; `acc_stderr_clustered` clusters by family (lmms-eval's `cluster_key`).\n"
            if peer == "lmms-eval"
            else "all 4 variants are; `acc_stderr_clustered` is the accuracy's standard error clustered by\n"
            "family.\n"
        )
    )


def export_tasks(peer: str, out_dir: str | Path, source: str, skipped: list[str] | None = None) -> list[Path]:
    """Write the task folder; returns the files written. ExportError names the flag or path.

    A local config with no rows is left out (and its task appended to `skipped`): `datasets`
    cannot read an empty parquet file ("BatchSize must be greater than 0"), and one task that
    fails to load fails the whole `casu` group in either harness."""
    from importlib.metadata import PackageNotFoundError, version

    from casu_dataset.formats.reader import is_local
    from harness.peers.common import GROUP, TASKS, casu_task

    if peer not in PEERS:
        raise ExportError(f"unknown peer {peer!r}: one of {', '.join(sorted(PEERS))}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out_dir}: exists and is not a folder")
    try:
        casu_version = version("casu")
    except PackageNotFoundError:
        casu_version = "source"
    header = HEADER.format(peer=peer, version=casu_version)
    files: dict[str, str] = {}
    tasks = []
    for t in TASKS:
        cfg = casu_task(t)
        if is_local(source) and not num_rows(local_files(source, cfg.dataset_config, cfg.split)):
            if skipped is not None:
                skipped.append(t)
            stale = out / f"{t}.yaml"  # an earlier export's, which would load and fail
            if stale.is_file() and stale.read_text(encoding="utf-8", errors="replace").startswith(
                "# Written by"
            ):
                stale.unlink()
            continue
        data = dataset_block(source, cfg.dataset_config, cfg.split)
        make = _lmms_task if peer == "lmms-eval" else _lm_task
        files[f"{t}.yaml"] = header + make(t, data, cfg.version, cfg.generation)
        tasks.append(t)
    if not tasks:
        raise ExportError(f"--dataset {source}: every task's config is empty: nothing to export")
    files[f"{GROUP}.yaml"] = header + f"group: {GROUP}\ntask:\n" + "".join(f"  - {t}\n" for t in tasks)
    files["utils.py"] = header + utils_py(peer)
    files["README.md"] = readme(peer, source)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in files.items():
            path = out / name
            tmp = out / f".{name}.tmp"
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
            written.append(path)
    except OSError as err:
        raise ExportError(f"{out_dir}: cannot write there ({err.strerror})") from None
    return written
