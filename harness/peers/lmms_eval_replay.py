"""`casu_replay` for the real lmms-eval: replays fixed answers by row id (model_adapters/replay.py's
file), for the sample-by-sample comparison with CASU's harness (scripts/peers_compare.py).

Importing this module registers the model (lmms-eval's `register_model`, and a manifest in its
model registry so `--model casu_replay` resolves by name); `python -m harness.peers.lmms_eval_replay
ARGS` is lmms-eval's CLI with it registered. Each request's audio is taken through the task's
`doc_to_visual` exactly as an audio model would take it, and checked: mono float32 at 16 kHz."""

from __future__ import annotations

import json
import time

from lmms_eval.api.model import lmms  # type: ignore[import-not-found]
from lmms_eval.api.registry import register_model  # type: ignore[import-not-found]

from model_adapters.replay import check_audio, lookup, read_responses

NAME = "casu_replay"


@register_model(NAME)
class CasuReplay(lmms):
    """Fixed replies by row id (`responses=FILE.jsonl`); `trace=FILE.jsonl` records what the model
    was handed (id, task, prompt, audio format); `check_audio=false` skips decoding the audio."""

    is_simple = True

    def __init__(self, responses: str, trace: str = "", check_audio: bool | str = True, **kwargs) -> None:
        super().__init__()
        self.path = responses
        self.responses, self.sha256 = read_responses(responses)
        self.trace_path = trace or ""
        self.check_audio = str(check_audio).lower() not in ("false", "0", "no")
        self.trace: list[dict] = []
        self.batch_size_per_gpu = 1
        # where the time goes: taking the audio through doc_to_visual, and looking replies up
        self.seconds = {"audio": 0.0, "lookup": 0.0}

    def generate_until(self, requests) -> list[str]:
        out, trace = [], []
        for req in requests:
            ctx, gen_kwargs, doc_to_visual, doc_id, task, split = req.args
            doc = self.task_dict[task][split][doc_id]
            rid = doc["id"]
            rec: dict = {"id": rid, "task": task, "prompt": ctx}
            if self.check_audio:
                t0 = time.perf_counter()
                visuals = doc_to_visual(doc)
                self.seconds["audio"] += time.perf_counter() - t0
                for v in visuals:
                    check_audio(v, rid)
                rec["audio"] = [
                    {
                        "sampling_rate": v["sampling_rate"],
                        "dtype": str(v["array"].dtype),
                        "ndim": v["array"].ndim,
                        "n": int(v["array"].size),
                    }
                    for v in visuals
                ]
            t0 = time.perf_counter()
            text = lookup(self.responses, self.path, rid, task)
            self.seconds["lookup"] += time.perf_counter() - t0
            for stop in (gen_kwargs or {}).get("until") or []:  # as a model stops at a stop string
                if stop:
                    text = text.split(stop, 1)[0]
            out.append(text)
            trace.append(rec)
        self.trace.extend(trace)
        if self.trace_path:
            with open(self.trace_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in trace)
        return out

    def loglikelihood(self, requests):
        raise NotImplementedError(f"{NAME}: replays generated text only (CASU's tasks are generate_until)")

    def generate_until_multi_round(self, requests):
        raise NotImplementedError(f"{NAME}: single-round tasks only")


def _register_manifest() -> None:
    """lmms-eval resolves `--model NAME` through its ModelRegistryV2, not register_model's table."""
    from lmms_eval import models  # type: ignore[import-not-found]
    from lmms_eval.models.registry_v2 import ModelManifest  # type: ignore[import-not-found]

    models.MODEL_REGISTRY_V2.register_manifest(
        ModelManifest(model_id=NAME, simple_class_path="harness.peers.lmms_eval_replay.CasuReplay"),
        overwrite=True,
    )


_register_manifest()


def main(argv: list[str] | None = None) -> None:
    """lmms-eval's own CLI, with `casu_replay` registered."""
    import sys

    from lmms_eval.__main__ import cli_evaluate  # type: ignore[import-not-found]

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
