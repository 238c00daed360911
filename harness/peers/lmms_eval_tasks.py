"""lmms-eval's hooks for CASU's tasks (the exported folder's `utils.py` imports them; see
harness/peers/common.py for what each part reuses). Importable without lmms-eval.

Multiple choice runs as `generate_until`: the reply is parsed by CASU's parser in
`process_results`, whose items carry `score` (0/1) and `family_id`, so lmms-eval's
`cluster_key: family_id` gives accuracy standard errors clustered by contrast family
(`acc_stderr_clustered`); family accuracy and the unparsed rate are aggregations over the same items."""

from __future__ import annotations

from collections.abc import Callable

from harness.peers import common


def doc_to_visual(doc: dict) -> list[dict]:
    """[{"array": mono float32, "sampling_rate": 16000, "type": "audio"}]: what lmms-eval's audio
    models read (`audio["array"]`, `audio["sampling_rate"]`, e.g. qwen2_audio, qwen2_5_omni); `type`
    makes a chat model's message an audio part (lmms-eval reads an untyped dict as video)."""
    return [dict(common.audio(doc), type="audio")]


def doc_to_text_for(task: str) -> Callable:
    """The task's doc_to_text: CASU's prompt, verbatim (lmms-eval passes lmms_eval_specific_kwargs)."""
    common.casu_task(task)  # an unknown task fails here, when the YAML loads

    def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
        return common.prompt(task, doc)

    doc_to_text.__name__ = f"{task}_doc_to_text"
    return doc_to_text


def process_results_for(task: str) -> Callable:
    """The task's process_results: one item per metric."""
    kind = common.casu_task(task).output_type

    def process_results(doc: dict, results: list) -> dict:
        if kind == "multiple_choice":
            item = common.score_choice(task, doc, common.first_reply(results))
            # without `score`, so lmms-eval's CLT standard errors are computed for acc only
            plain = {k: v for k, v in item.items() if k != common.SCORE_KEY}
            return {"acc": item, "family_acc": plain, "unparsed_rate": plain}
        item = common.description_item(task, doc, common.first_reply(results))
        return {m: item for m in ("bleu", "bertscore", "event_match", "one_minus_wer")}

    process_results.__name__ = f"{task}_process_results"
    return process_results


# aggregations: lmms-eval calls each with the list of its items
accuracy = common.accuracy
family_accuracy = common.family_accuracy
unparsed_rate = common.unparsed_rate

bleu4 = common.bleu4
bertscore = common.bertscore
event_match = common.event_match
one_minus_wer = common.one_minus_wer
