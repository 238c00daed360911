"""`casu-replay` for the real lm-eval: replays fixed answers by row id (model_adapters/replay.py's
file), for the sample-by-sample comparison with CASU's harness (scripts/peers_compare.py).

Importing this module registers the model (lm-eval's `register_model`); `python -m
harness.peers.lm_eval_replay ARGS` is lm-eval's CLI with it registered. It is a multimodal model
(lm-eval hands it each request's `doc_to_audio` output), and checks that audio: mono float32 at
16 kHz."""

from __future__ import annotations

import json

from lm_eval.api.model import LM  # type: ignore[import-not-found]
from lm_eval.api.registry import register_model  # type: ignore[import-not-found]

from model_adapters.replay import check_audio, lookup, read_responses

NAME = "casu-replay"


@register_model(NAME)
class CasuReplay(LM):
    """Fixed replies by row id (`responses=FILE.jsonl`); `trace=FILE.jsonl` records what the model
    was handed (id, task, prompt, audio format)."""

    MULTIMODAL = True

    def __init__(self, responses: str, trace: str = "", check_audio: bool | str = True, **kwargs) -> None:
        super().__init__()
        self.path = responses
        self.responses, self.sha256 = read_responses(responses)
        self.trace_path = trace or ""
        self.check_audio = str(check_audio).lower() not in ("false", "0", "no")

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        from lm_eval.utils import simple_parse_args_string  # type: ignore[import-not-found]

        args = simple_parse_args_string(arg_string)
        return cls(**args, **{k: v for k, v in (additional_config or {}).items() if v is not None})

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out, trace = [], []
        for req in requests:
            ctx, gen_kwargs = req.args[0], req.args[1]
            aux = req.args[2] if len(req.args) > 2 else {}
            doc = req.doc
            rid, task = doc["id"], req.task_name
            rec: dict = {"id": rid, "task": task, "prompt": ctx}
            if self.check_audio:
                audios = (aux or {}).get("audio")
                if not audios:
                    raise ValueError(f"{NAME}: request for id {rid!r} carries no audio (doc_to_audio)")
                for a in audios:
                    check_audio(a, rid)
                rec["audio"] = [
                    {
                        "sampling_rate": a["sampling_rate"],
                        "dtype": str(a["array"].dtype),
                        "ndim": a["array"].ndim,
                        "n": int(a["array"].size),
                    }
                    for a in audios
                ]
            text = lookup(self.responses, self.path, rid, task)
            for stop in (gen_kwargs or {}).get("until") or []:  # as a model stops at a stop string
                if stop:
                    text = text.split(stop, 1)[0]
            out.append(text)
            trace.append(rec)
        if self.trace_path:
            with open(self.trace_path, "a", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in trace)
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{NAME}: replays generated text only (CASU's tasks are generate_until)")

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        raise NotImplementedError(f"{NAME}: replays generated text only")


def main(argv: list[str] | None = None) -> None:
    """lm-eval's own CLI, with `casu-replay` registered."""
    import sys

    from lm_eval.__main__ import cli_evaluate  # type: ignore[import-not-found]

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    cli_evaluate()


if __name__ == "__main__":
    main()
