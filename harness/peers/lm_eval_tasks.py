"""lm-eval's hooks for CASU's tasks (the exported folder's `utils.py` imports them; see
harness/peers/common.py for what each part reuses). Importable without lm-eval.

Multiple choice runs as `generate_until` with CASU's parser in `process_results` (lm-eval's own
multiple_choice scores option log-likelihoods, another protocol). `acc` is a 0/1 per sample
(lm-eval's `mean` and its standard error); `family_acc`, `acc_stderr_clustered` (by contrast
family) and `unparsed_rate` are aggregation functions over per-sample items. The prompt starts
with lm-eval's audio placeholder `<audio>` (its audio LMs, e.g. hf-audiolm-qwen, put the audio
there), then CASU's prompt verbatim."""

from __future__ import annotations

from collections.abc import Callable

from harness.peers import common

AUDIO_PLACEHOLDER = "<audio>"


def doc_to_audio(doc: dict) -> list[dict]:
    """[{"array": mono float32, "sampling_rate": 16000}]: what lm-eval's audio LMs read."""
    return [common.audio(doc)]


def doc_to_text_for(task: str) -> Callable:
    common.casu_task(task)

    def doc_to_text(doc: dict) -> str:
        return AUDIO_PLACEHOLDER + common.prompt(task, doc)

    doc_to_text.__name__ = f"{task}_doc_to_text"
    return doc_to_text


def process_results_for(task: str) -> Callable:
    kind = common.casu_task(task).output_type

    def process_results(doc: dict, results: list) -> dict:
        if kind == "multiple_choice":
            item = common.score_choice(task, doc, common.first_reply(results))
            return {
                "acc": item[common.SCORE_KEY],
                "family_acc": item,
                "acc_stderr_clustered": item,
                "unparsed_rate": item,
            }
        item = common.description_item(task, doc, common.first_reply(results))
        return {m: item for m in ("bleu", "bertscore", "event_match", "one_minus_wer")}

    process_results.__name__ = f"{task}_process_results"
    return process_results


family_accuracy = common.family_accuracy
accuracy_stderr_clustered = common.accuracy_stderr_clustered
unparsed_rate = common.unparsed_rate
bleu4 = common.bleu4
bertscore = common.bertscore
event_match = common.event_match
one_minus_wer = common.one_minus_wer
