"""The shapes results travel in between the harness's stages, typed (harness/RESULTS.md describes
every key): what `run.evaluate.evaluate` returns (`Evaluation`), CASU's results document
(`ResultsDocument`, `casu_results_<date>.json`) and the pieces both share. It sits in run/, the
lowest stage that produces these shapes, so the output stage reads it without an import going
back. lm-eval's own document (`results_<date>.json`, `samples_<task>_<date>.jsonl`) is typed in
`harness.output.lm_eval_schema`.

TypedDicts, as lm-eval's `result_schema.py`: the values stay the plain JSON-ready dicts the files
are written from (same bytes), and a type checker sees every key a writer, table or push reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:
    from harness.scoring.records import ScoredRecord

# A task's metrics under one condition: {"n", "n_errors", "accuracy": {"value", "ci95", "n"}, ...}
# (the registered metrics of its kind, harness/scoring/metrics.py; their values differ per metric).
ConditionMetrics = dict[str, Any]
# task -> condition name ("PEB", "P__", ...) -> metrics
TaskResults = dict[str, dict[str, ConditionMetrics]]


class SampleError(TypedDict):
    """One failed request (`errors`); `dataset` only for the second realization's."""

    task: str
    condition: str
    id: str
    rotation: int
    error: str
    dataset: NotRequired[str]


class AudioProbe(TypedDict):
    """Whether the answers change with silent or swapped audio (`audio_probe`)."""

    status: Literal["ok", "unchanged", "skipped", "error"]
    reason: NotRequired[str]
    task: NotRequired[str]
    questions: NotRequired[list[dict[str, Any]]]


class TaskCounts(TypedDict):
    config: str
    split: str
    rows: int
    samples: int
    requests: int


class Evaluated(TypedDict):
    """What was evaluated (`evaluated`): requests = samples x conditions x rotations."""

    requests: int
    samples: int
    conditions: int
    per_task: dict[str, TaskCounts]


class Timing(TypedDict):
    """Run-time figures (`timing`): they differ between two runs of the same evaluation."""

    total_s: float
    inference_phase_s: float
    model_s: float
    scoring_s: float
    audio_s: float
    units: int
    model_calls: int
    cache_hits: int
    overhead_ms_per_unit: float


class Evaluation(TypedDict):
    """`run.evaluate.evaluate`'s output: one evaluation's results, scored samples and how it ran."""

    results: TaskResults
    samples: dict[str, list[ScoredRecord]]
    errors: list[SampleError]
    audio_probe: AudioProbe
    dataset_fingerprint: str
    dataset_identity: dict[str, Any] | None
    evaluated: Evaluated
    generation: dict[str, dict[str, Any]]  # task -> its generation settings (lm-eval's gen_kwargs)
    scoring: dict[str, str | None]  # task -> "generate" or "loglikelihood"
    timing: Timing
    truncated_audio: int


class ModelRecord(TypedDict):
    """`model`: the adapter as given and as it describes itself."""

    name: str
    args: dict[str, Any]
    info: dict[str, Any]
    fingerprint: str
    meta: NotRequired[dict[str, Any]]
    tokenizer: NotRequired[dict[str, Any]]
    chat_template: NotRequired[str | None]


class DatasetRecord(TypedDict):
    """`dataset`: what was read, and a hash of exactly the bytes evaluated."""

    path: str
    named_by: str
    fingerprint: str
    identity: dict[str, Any] | None


class GroupRecord(TypedDict):
    """One lm-eval group file of the run (`groups`)."""

    alias: str | None
    tasks: list[str]
    file: str | None
    version: Any
    aggregate_metric_list: list[dict[str, Any]]
    results: dict[str, dict[str, Any]]


class FileRecord(TypedDict):
    """A sample log the run wrote (`sample_logs`, `lm_eval_sample_logs`)."""

    file: str
    lines: int
    sha256: str


class Realization(TypedDict):
    path: str
    fingerprint: str
    identity: dict[str, Any] | None
    results: NotRequired[TaskResults]
    evaluated: NotRequired[Evaluated]
    n_errors: NotRequired[int]
    errors: NotRequired[list[SampleError]]


class Robustness(TypedDict):
    """`robustness` (with --robustness_dataset): both realizations and the consistency over all
    multiple-choice tasks per condition."""

    metric: str
    realization1: Realization
    realization2: Realization
    overall: dict[str, dict[str, Any]]


class ResultsDocument(TypedDict):
    """CASU's results document, `casu_results_<date>.json` (harness/RESULTS.md). `complete`,
    `sample_logs`, `lm_eval_sample_logs` and `lm_eval_view` are added as the run's files are
    written; `robustness` only with --robustness_dataset."""

    schema_version: int
    date: str
    git_hash: str | None
    versions: dict[str, str | None]
    model: ModelRecord
    config: dict[str, Any]  # run_config's block, plus lm-eval's keywords as given
    dataset: DatasetRecord
    generation: dict[str, dict[str, Any]]
    scoring: dict[str, str | None]
    audio_probe: AudioProbe
    results: TaskResults
    groups: dict[str, GroupRecord]
    n_samples: dict[str, int]
    evaluated: Evaluated
    status: Literal["ok", "errors"]
    n_errors: int
    errors: list[SampleError]
    truncated_audio: int
    timing: Timing
    run_times: dict[str, float]
    env: dict[str, Any]
    task_hashes: dict[str, str]
    robustness: NotRequired[Robustness]
    complete: NotRequired[bool]
    sample_logs: NotRequired[dict[str, FileRecord]]
    lm_eval_sample_logs: NotRequired[dict[str, FileRecord]]
    lm_eval_view: NotRequired[str]
    casu_document: NotRequired[str]
