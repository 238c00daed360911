"""Run in a subprocess under a forced instruction-set setting (casu_dataset/core/isa.py) by
tests/test_portability.py: prints, as JSON, a digest of every number CASU records that a CPU's
kernels could change (embeddings, retrieval scores and picks, Whisper transcripts, a mix)."""

import hashlib
import json
import sys

import numpy as np


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()[:16]


def main(speech_wav: str, bed: str, event: str) -> None:
    import tempfile

    from casu_dataset.core.isa import describe
    from casu_dataset.mix.mixer import SceneSources, SourceRef, compose
    from casu_dataset.script.schema import parse_script
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Embedder, Retriever
    from casu_dataset.speech.intelligibility import WhisperChecker
    from harness.scoring.metrics import bertscore_f1

    cat = Catalog.embedded()
    emb = Embedder(disk_cache=False)  # the model itself, not vectors cached by an earlier run
    texts = [c.caption for c in cat.clips[:48]]
    single = np.stack([emb.encode([t])[0] for t in texts])
    batch = Embedder(disk_cache=False).encode(texts, batch_size=16)  # fresh: a memo returns `single`
    r = Retriever(cat, emb, cache_dir=tempfile.mkdtemp())
    qd, qk = r.encode_queries(texts[:8], [["dog"]] * 8)
    pick = r.choose("a bell rings at school", ["bell", "school"], np.random.default_rng(3), kind="event")
    bert = bertscore_f1(texts[:6], texts[6:12])
    transcript = WhisperChecker().check_file(
        speech_wav, "Please keep your seatbelt fastened while the sign is on."
    )
    s = parse_script(
        {
            "id": "probe",
            "place": "school",
            "speech_type": "monologue",
            "background": {"description": "a playground", "keywords": ["school"]},
            "speakers": [{"id": "T", "role": "teacher", "gender": "female"}],
            "turns": [{"speaker": "T", "text": "Please keep your seatbelt fastened while the sign is on."}],
            "events": [
                {
                    "id": "bell",
                    "description": "a bell",
                    "keywords": ["bell"],
                    "anchor": {"type": "after_turn", "turn": 0, "offset": 0.2},
                }
            ],
        }
    )
    mix = compose(
        s,
        SceneSources(SourceRef(bed, "bed"), [SourceRef(speech_wav, "turn")], [SourceRef(event, "ev")]),
        seed=7,
    )
    print(
        json.dumps(
            {
                "machine": describe(),
                "embeddings": sha(single.tobytes()),
                "embeddings_batched": sha(batch.tobytes()),
                "scores": sha(r.score_matrix(qd, qk).tobytes()),
                "pick": [pick.clip.id, pick.score],
                "whisper": transcript,
                "bertscore": bert,
                "mix": {k: sha(v.tobytes()) for k, v in {"mixture": mix.mixture, **mix.stems}.items()},
                "gains": json.dumps(mix.annotation["gains"], sort_keys=True),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
